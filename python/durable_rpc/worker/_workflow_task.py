"""One workflow task: replay the history through the Rust machine and the runtime.

Pure and synchronous (history in, commands out), so the worker can run it in a thread
under a deadline and tests and offline replayers can call it directly. A claimed task
goes through :func:`decide_task`, which continues the run's live instance when the
worker kept one (see ``_live_runs.py``) and replays from event 1 otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from durable_rpc import _core
from durable_rpc.v1 import history_pb2, payload_pb2, service_pb2, workflow_task_pb2
from durable_rpc.worker._live_runs import LiveRun
from durable_rpc.worker._local_activity import run_local_activity
from durable_rpc.workflow._definition import WorkflowDefinition
from durable_rpc.workflow._errors import WorkflowTaskError
from durable_rpc.workflow._runtime import QueryError, WorkflowInstance
from durable_rpc.workflow._values import DEFAULT_HISTORY_WARN


def last_event_id(history: history_pb2.History) -> int:
    return history.events[-1].event_id if history.events else 0


@dataclass(frozen=True)
class Decision:
    """What one workflow task decided: the new commands, and the pending updates the
    workflow's validators rejected (reported to the server, never recorded)."""

    commands: Sequence[workflow_task_pb2.Command]
    rejected_updates: Sequence[tuple[str, payload_pb2.Failure]]


def decide(
    definition: WorkflowDefinition,
    history: bytes,
    task_time_ms: int,
    *,
    task_queue: str,
    pending_updates: Sequence[workflow_task_pb2.DoUpdateJob] = (),
    deadline: float | None = None,
    history_warn: tuple[int, int] = DEFAULT_HISTORY_WARN,
) -> Decision:
    """Replay ``history``, then deliver ``pending_updates`` (requests not in history yet)
    after the new input events. ``history_warn``: the server's warn marks (events, bytes)
    for ``workflow.info().continue_as_new_suggested``. Raises what :func:`replay` raises."""
    instance, new_commands = _run(
        definition,
        history,
        task_time_ms,
        task_queue,
        pending_updates,
        deadline,
        inline=False,
        history_warn=history_warn,
    )
    _settle_local_activities(instance, new_commands, deadline)
    return Decision(new_commands, list(instance.rejected_updates))


@dataclass(frozen=True)
class TaskDecision:
    """A claimed task's decision, the live run to keep once the server accepted it, and
    how it was reached: ``continued`` (only the new events were applied to a kept
    instance) or, when a kept instance could not be continued, ``diverged`` (why)."""

    decision: Decision
    run: LiveRun
    continued: bool
    diverged: str | None


def decide_task(
    definition: WorkflowDefinition,
    task: service_pb2.PollWorkflowTaskResponse,
    live: LiveRun | None,
    *,
    task_queue: str,
    deadline: float | None = None,
    history_warn: tuple[int, int] = DEFAULT_HISTORY_WARN,
) -> TaskDecision:
    """Decide the claimed ``task`` (its history whole): from ``live``, the run's instance
    kept after its previous task on this worker, applying only the events after the
    ones it knows, or -- without one, or when the history does not continue it -- by
    replaying from event 1. Both produce the same commands. Raises what :func:`replay`
    raises."""
    task_time_ms = task.workflow_time.ToMilliseconds()
    diverged: str | None = None
    # The encoded size of the events the machine consumes, from the bytes it is handed.
    history_bytes = 0
    if live is not None:
        tail = history_pb2.History(events=task.history.events[live.known :]).SerializeToString()
        history_bytes = live.history_bytes + len(tail)
        try:
            diverged = live.machine.continue_with(tail, task_time_ms, live.sent)
        except _core.MalformedHistoryError as exc:
            diverged = str(exc)  # the cold replay below reports it
        if diverged is not None:
            live.instance.loop.abandon()
            live = None
    if live is not None:
        machine, instance = live.machine, live.instance
        instance.deadline = deadline
        instance.history_warn = history_warn
        instance.rejected_updates = []
    else:
        whole = task.history.SerializeToString()
        history_bytes = len(whole)
        machine = _core.ReplayMachine(whole, task_time_ms)
        instance = WorkflowInstance(
            definition, task_queue=task_queue, deadline=deadline, history_warn=history_warn
        )
    for u in task.pending_updates:
        update = workflow_task_pb2.DoUpdateJob(
            update_id=u.update_id, update_name=u.update_name, input=u.input, validate=True
        )
        machine.add_pending_update(update.SerializeToString())
    new_commands = _drive(machine, instance, deadline)
    _settle_local_activities(instance, new_commands, deadline)
    decision = Decision(new_commands, list(instance.rejected_updates))
    run = LiveRun(machine, instance, known=last_event_id(task.history), history_bytes=history_bytes)
    return TaskDecision(decision, run, continued=live is not None, diverged=diverged)


def _settle_local_activities(
    instance: WorkflowInstance,
    new_commands: list[workflow_task_pb2.Command],
    deadline: float | None,
) -> None:
    """Local activities the live code waits for: run them here, then resolve them in a
    follow-up activation of the same task (recorded as local_activity markers)."""
    while pending := instance.pending_local_activities():
        outcomes = [run_local_activity(request, deadline) for request in pending]
        new_commands.extend(instance.resolve_local_activities(outcomes))


def decide_inline(
    definition: WorkflowDefinition,
    history: bytes,
    *,
    task_queue: str,
    deadline: float | None = None,
    history_warn: tuple[int, int] = DEFAULT_HISTORY_WARN,
) -> Decision | None:
    """Decide the workflow task whose only new input is the last event of ``history``
    before the server creates it (see worker/_inline.py). Its clock is the database time
    of the commit that will record it, unknown now: ``None`` when the code read the
    clock, waits for a local activity (never run for a decision that may be dropped) or
    fails in any way (the ordinary task then meets the same failure and reports it)."""
    try:
        instance, new_commands = _run(
            definition, history, 0, task_queue, (), deadline, inline=True, history_warn=history_warn
        )
    except Exception:
        return None
    if instance.read_unknown_clock or instance.pending_local_activities():
        return None
    return Decision(new_commands, [])


def _run(
    definition: WorkflowDefinition,
    history: bytes,
    task_time_ms: int,
    task_queue: str,
    pending_updates: Sequence[workflow_task_pb2.DoUpdateJob],
    deadline: float | None,
    *,
    inline: bool,
    history_warn: tuple[int, int] = DEFAULT_HISTORY_WARN,
) -> tuple[WorkflowInstance, list[workflow_task_pb2.Command]]:
    machine = _core.ReplayMachine(history, task_time_ms)
    for update in pending_updates:
        machine.add_pending_update(update.SerializeToString())
    instance = WorkflowInstance(
        definition, task_queue=task_queue, deadline=deadline, history_warn=history_warn
    )
    instance.clock_unknown_when_live = inline
    return instance, _drive(machine, instance, deadline)


def _drive(
    machine: _core.ReplayMachine, instance: WorkflowInstance, deadline: float | None
) -> list[workflow_task_pb2.Command]:
    """Every activation of ``machine`` through ``instance``: the new commands."""
    try:
        while (raw := machine.next_activation()) is not None:
            if deadline is not None and time.monotonic() > deadline:
                raise WorkflowTaskError("replay ran past the workflow task deadline")
            completion = instance.activate(workflow_task_pb2.Activation.FromString(raw))
            machine.complete_activation(completion.SerializeToString())
    except BaseException:
        instance.loop.abandon()  # the task fails: its instance is dropped
        raise
    commands = workflow_task_pb2.ActivationCompletion.FromString(machine.take_new_commands())
    return list(commands.commands)


def replay(
    definition: WorkflowDefinition,
    history: bytes,
    task_time_ms: int,
    *,
    task_queue: str,
    deadline: float | None = None,
) -> Sequence[workflow_task_pb2.Command]:
    """The new commands the workflow produces after ``history``.

    Raises :class:`durable_rpc._core.NondeterminismError` when the code no longer
    matches the recorded commands, ``MalformedHistoryError`` for a broken history, and
    :class:`WorkflowTaskError` for runtime-level failures, including running past
    ``deadline`` (a ``time.monotonic()`` instant).
    """
    return decide(
        definition, history, task_time_ms, task_queue=task_queue, deadline=deadline
    ).commands


def answer_query(
    definition: WorkflowDefinition,
    history: bytes,
    task_time_ms: int,
    query_name: str,
    query_input: bytes,
    *,
    task_queue: str,
    deadline: float | None = None,
) -> bytes:
    """Replay ``history`` (every event, including those no workflow task processed yet)
    and answer query ``query_name`` from the rebuilt instance: the encoded result.

    The commands the replay produces are discarded: a query never changes the run.
    Raises :class:`QueryError` when the handler cannot answer, and what :func:`replay`
    raises when the history cannot be replayed with this code.
    """
    machine = _core.ReplayMachine(history, task_time_ms)
    instance = WorkflowInstance(definition, task_queue=task_queue, deadline=deadline)
    try:
        while (raw := machine.next_activation()) is not None:
            if deadline is not None and time.monotonic() > deadline:
                raise WorkflowTaskError("replay ran past the query deadline")
            completion = instance.activate(workflow_task_pb2.Activation.FromString(raw))
            machine.complete_activation(completion.SerializeToString())
        return instance.query(query_name, query_input)
    finally:
        instance.loop.abandon()  # the instance only existed to answer


__all__ = [
    "Decision",
    "QueryError",
    "TaskDecision",
    "answer_query",
    "decide",
    "decide_inline",
    "decide_task",
    "last_event_id",
    "replay",
]
