"""Where a redrive cuts a failed run's history, and what the cut leaves outstanding.

Pure: no I/O. ``_ops_redrive`` reads the failed run's history, asks :func:`cut` which
events the new run keeps, and writes them with the tasks the cut leaves outstanding.

The boundary is the failed run's last ``ActivityCompleted``: everything after it (the
decision that failed the run, activities scheduled after it, their failures) is left out,
so the new run's first workflow task decides again from there. ActivityCompleted is an
input event, never part of a decision's command group, so the cut never splits a group
(replay would see a partial task). Inside the kept prefix, an activity failure that no
kept decision saw (after the last kept marker's ``last_seen_event_id``) is left out too:
it is what failed the run, and the fixed code runs that activity again. A failure a kept
decision saw was handled by the workflow's code (the decisions after it depend on it), so
it stays, as does an ambiguous one (the effect may have happened: redrive never re-runs a
non-idempotent effect on its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.v1 import history_pb2

_ACTIVITY_OUTCOMES = ("activity_completed", "activity_failed", "activity_cancelled")
_TIMER_OUTCOMES = ("timer_fired", "timer_cancelled")
_CHILD_OUTCOMES = (
    "child_workflow_start_failed",
    "child_workflow_completed",
    "child_workflow_failed",
    "child_workflow_cancelled",
    "child_workflow_terminated",
    "child_workflow_timed_out",
)


@dataclass(slots=True)
class RedriveCut:
    """The new run's history and what it has outstanding."""

    #: The kept events, renumbered 1..N (event 1 is still the failed run's start).
    events: list[history_pb2.HistoryEvent]
    #: The failed run's last event id the cut keeps (its events after it are left out).
    resumed_after_event_id: int
    #: Completed activities the new run keeps (their results replay).
    kept_activities: int
    #: Activities scheduled in the kept events with no outcome: they get a new task.
    pending_activities: list[history_pb2.ActivityScheduled] = field(default_factory=list)
    #: Of those, the ones workflow code had asked to cancel: cancelled at once instead.
    cancelled_activities: list[int] = field(default_factory=list)
    #: Timers started and not fired or cancelled: (seq, due time in ms).
    pending_timers: list[tuple[int, int]] = field(default_factory=list)
    #: The kept events include a cancellation request of the run.
    cancel_requested: bool = False
    #: ... one recorded before cooperative cancellation: that server had told every
    #: activity of the run to stop, so the new run's re-queued activities are told too
    #: (a cooperative request leaves them to the workflow code's cancellation policies).
    cancel_tells_activities: bool = False


def cut(failed_run_id: str, history: Sequence[history_pb2.HistoryEvent]) -> RedriveCut:
    """Where to cut ``history`` (a failed run's, in order). Raises InvalidArgumentError
    when the kept events leave a child workflow outstanding: the child belongs to the
    failed run (its parent-close policy already applied) and cannot be handed over."""
    if not history or history[0].WhichOneof("attributes") != "workflow_started":
        raise InvalidArgumentError(f"run {failed_run_id!r} has no WorkflowStarted event")
    boundary = 1  # no completed activity: the new run starts over from the input
    for event in history:
        if event.WhichOneof("attributes") == "activity_completed":
            boundary = event.event_id
    prefix = [event for event in history if event.event_id <= boundary]
    last_seen = max(
        (
            event.workflow_task_completed.last_seen_event_id
            for event in prefix
            if event.WhichOneof("attributes") == "workflow_task_completed"
        ),
        default=0,
    )
    kept: list[history_pb2.HistoryEvent] = []
    for event in prefix:
        if (
            event.WhichOneof("attributes") == "activity_failed"
            and event.event_id > last_seen
            and not event.activity_failed.ambiguous
        ):
            continue
        renumbered = history_pb2.HistoryEvent()
        renumbered.CopyFrom(event)
        renumbered.event_id = len(kept) + 1
        kept.append(renumbered)
    result = RedriveCut(
        events=kept,
        resumed_after_event_id=boundary,
        kept_activities=sum(
            1 for event in kept if event.WhichOneof("attributes") == "activity_completed"
        ),
    )
    _outstanding(failed_run_id, kept, result)
    return result


def _outstanding(
    failed_run_id: str, kept: Sequence[history_pb2.HistoryEvent], result: RedriveCut
) -> None:
    scheduled: dict[int, history_pb2.ActivityScheduled] = {}
    cancel_asked: set[int] = set()
    timers: dict[int, int] = {}
    children: dict[int, str] = {}
    for event in kept:
        kind = event.WhichOneof("attributes")
        attributes = getattr(event, kind) if kind else None
        if kind == "activity_scheduled":
            scheduled[event.activity_scheduled.seq] = event.activity_scheduled
        elif kind in _ACTIVITY_OUTCOMES:
            scheduled.pop(attributes.seq, None)  # type: ignore[union-attr]
        elif kind == "activity_cancel_requested":
            cancel_asked.add(event.activity_cancel_requested.seq)
        elif kind == "timer_started":
            duration = event.timer_started.duration
            started_ms = event.event_time.ToMilliseconds()
            timers[event.timer_started.seq] = (
                started_ms + duration.seconds * 1000 + duration.nanos // 1_000_000
            )
        elif kind in _TIMER_OUTCOMES:
            timers.pop(attributes.seq, None)  # type: ignore[union-attr]
        elif kind == "child_workflow_initiated":
            children[event.child_workflow_initiated.seq] = (
                event.child_workflow_initiated.workflow_id
            )
        elif kind in _CHILD_OUTCOMES:
            children.pop(attributes.seq, None)  # type: ignore[union-attr]
        elif kind == "cancel_requested":
            result.cancel_requested = True
            result.cancel_tells_activities = not event.cancel_requested.cooperative
    if children:
        seq, child_id = next(iter(sorted(children.items())))
        raise InvalidArgumentError(
            f"run {failed_run_id!r} cannot be redriven: its child workflow {child_id!r} "
            f"(seq {seq}) had not closed at the last completed activity, and a child "
            "belongs to the run that started it"
        )
    for seq, activity in sorted(scheduled.items()):
        if seq in cancel_asked:
            result.cancelled_activities.append(seq)
        else:
            result.pending_activities.append(activity)
    result.pending_timers = sorted(timers.items())
