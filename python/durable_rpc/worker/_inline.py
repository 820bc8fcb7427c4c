"""Inline workflow tasks: decide a run's next workflow task together with the activity
completion that causes it, saving a round trip and a durable commit per activity.

After a workflow-task completion the server answers the events it appended; the worker
keeps the run's whole history (`StickyHistories`, within the worker's
``StickyCacheOptions``: entries, their bytes and TTL, least recently used out).
When one of the run's activities completes on this worker, the worker appends the
``ActivityCompleted`` event the server would append, replays, and sends the resulting
commands with the completion (``CompleteActivityTaskRequest.inline_workflow_task``).
The server records them in the completion's transaction under the activity's fenced
lease only if its history still ends where the worker's copy does and no other workflow
task exists; otherwise it completes the activity alone and the ordinary workflow task
follows. Either way nothing is decided twice or from a stale history.

The decided activation's clock is the database time of that commit, which the code
cannot know while it runs: a decision whose code read ``workflow.now()`` is dropped
(:func:`durable_rpc.worker._workflow_task.decide_inline`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from durable_rpc.v1 import history_pb2, payload_pb2, service_pb2, workflow_task_pb2
from durable_rpc.worker._sticky_cache import BoundedCache, StickyCacheOptions

# Commands after which the run has no next workflow task to decide.
_CLOSING = frozenset({"complete_workflow", "fail_workflow", "cancel_workflow", "continue_as_new"})


def closes_run(commands: Sequence[workflow_task_pb2.Command]) -> bool:
    """Whether ``commands`` end the run (no next workflow task follows)."""
    return any(c.WhichOneof("kind") in _CLOSING for c in commands)


@dataclass(slots=True)
class StickyRun:
    workflow_id: str
    workflow_type: str
    workflow_version: str
    #: A serialized History: event ids 1..history_length, exactly as stored.
    history: bytes
    history_length: int
    trace_context: dict[str, str]


class StickyHistories:
    """The histories of the runs this worker decided last, by run id, within the
    worker's sticky cache bounds (entries, their bytes, TTL; ``_sticky_cache.py``)."""

    def __init__(self, options: StickyCacheOptions) -> None:
        self._runs: BoundedCache[StickyRun] = BoundedCache(options)

    def __len__(self) -> int:
        return len(self._runs)

    @property
    def history_bytes(self) -> int:
        return self._runs.history_bytes

    def get(self, run_id: str) -> StickyRun | None:
        return self._runs.get(run_id)

    def forget(self, run_id: str) -> None:
        self._runs.forget(run_id)

    def take(self, run_id: str) -> StickyRun | None:
        """Removes and returns ``run_id``'s history (a workflow task of it began)."""
        return self._runs.take(run_id)

    def clear(self) -> None:
        self._runs.clear()

    def extend(
        self,
        run: StickyRun,
        run_id: str,
        commands: list[workflow_task_pb2.Command],
        appended: history_pb2.History,
        history_length: int,
    ) -> None:
        """Keep ``run``'s history plus ``appended``, the events the server appended with
        a decision; forget the run when that left gaps (other events arrived meanwhile)
        or closed it."""
        if closes_run(commands) or run.history_length + len(appended.events) != history_length:
            self.forget(run_id)
            return
        run.history += appended.SerializeToString()
        run.history_length = history_length
        self._runs.put(run_id, run, len(run.history))


def sticky_run(task: service_pb2.PollWorkflowTaskResponse, history: bytes) -> StickyRun:
    """A workflow task's run, with the history it was handed (``history``, serialized)."""
    events = task.history.events
    started = events[0].workflow_started if events else None
    return StickyRun(
        workflow_id=task.workflow_id,
        workflow_type=task.workflow_type,
        workflow_version=task.workflow_version,
        history=history,
        history_length=events[-1].event_id if events else 0,
        trace_context=dict(started.trace_context) if started is not None else {},
    )


def task_history_bytes(task: service_pb2.PollWorkflowTaskResponse, kept: StickyRun | None) -> bytes:
    """``task``'s history, serialized: the ``kept`` bytes of its first events plus only
    the events after them when they continue it (serializing the whole history again
    at every task would cost O(history)), else the whole history."""
    events = task.history.events
    known = kept.history_length if kept is not None else 0
    if kept is None or not 0 < known <= len(events) or events[known - 1].event_id != known:
        return task.history.SerializeToString()
    # Serialized messages concatenate: the repeated field's elements follow on.
    return kept.history + history_pb2.History(events=events[known:]).SerializeToString()


def with_activity_result(
    run: StickyRun, task: service_pb2.PollActivityTaskResponse, worker_id: str, result: bytes
) -> bytes:
    """``run``'s history plus the ActivityCompleted event completing ``task`` would append
    (its time is not known yet; replay never reads an input event's time)."""
    event = history_pb2.HistoryEvent(
        event_id=run.history_length + 1,
        activity_completed=history_pb2.ActivityCompleted(
            seq=task.seq,
            result=payload_pb2.Payload(data=result),
            attempt=task.attempt,
            worker_id=worker_id,
            fencing_token=task.fencing_token,
        ),
    )
    return run.history + history_pb2.History(events=[event]).SerializeToString()


__all__ = [
    "StickyHistories",
    "StickyRun",
    "closes_run",
    "sticky_run",
    "task_history_bytes",
    "with_activity_result",
]
