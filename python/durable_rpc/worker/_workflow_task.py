"""One workflow task: replay the history through the Rust machine and the runtime.

Pure and synchronous (bytes in, commands out), so the worker can run it in a thread
under a deadline and tests and offline replayers can call it directly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from durable_rpc import _core
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2
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
    # Local activities the live code waits for: run them here, then resolve them in a
    # follow-up activation of the same task (recorded as local_activity markers).
    while pending := instance.pending_local_activities():
        outcomes = [run_local_activity(request, deadline) for request in pending]
        new_commands.extend(instance.resolve_local_activities(outcomes))
    return Decision(new_commands, list(instance.rejected_updates))


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
    return instance, list(commands.commands)


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
    "answer_query",
    "decide",
    "decide_inline",
    "last_event_id",
    "replay",
]
