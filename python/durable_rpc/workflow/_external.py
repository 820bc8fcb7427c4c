"""Signals from workflow code to other runs of the namespace.

``await workflow.get_external_workflow_handle(id).signal(Other.poke, *args)`` (or a
child's ``handle.signal(...)``) emits a SignalExternalWorkflow command (it takes a seq);
the store delivers the signal in the transaction that records the decision and answers
with an input event: ExternalSignalDelivered, or ExternalSignalFailed when there is no
such run or it is closed. The next activation resolves the awaiting code with it, so a
replay gives the same answer without asking again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_rpc import converter
from durable_rpc.v1 import payload_pb2, workflow_task_pb2

if TYPE_CHECKING:
    from durable_rpc.workflow._runtime import WorkflowInstance


class ExternalSignalError(Exception):
    """The signal could not be delivered: ``reason`` is "NOT_FOUND" (no such run),
    "WORKFLOW_NOT_RUNNING" (the run is closed) or "SIGNAL_NOT_DECLARED" (the run's code
    does not read that signal)."""

    failure_type = "ExternalSignalError"

    def __init__(self, message: str, *, workflow_id: str, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.workflow_id = workflow_id
        self.reason = reason


@dataclass
class PendingSignal:
    seq: int
    workflow_id: str
    signal_name: str
    delivered: asyncio.Future[None]


def send(
    instance: WorkflowInstance,
    workflow_id: str,
    run_id: str,
    signal: Callable[..., Any] | str,
    args: tuple[Any, ...],
) -> asyncio.Future[None]:
    """Emits SignalExternalWorkflow (taking the next seq); the future resolves when the
    store answered."""
    from durable_rpc.client._refs import signal_name

    name = signal_name(signal)
    seq = instance._take_seq()
    pending = PendingSignal(seq, workflow_id, name, instance.loop.create_future())
    instance._signals_sent[seq] = pending
    instance._emit(
        workflow_task_pb2.Command(
            seq=seq,
            signal_external_workflow=workflow_task_pb2.SignalExternalWorkflow(
                workflow_id=workflow_id,
                run_id=run_id,
                signal_name=name,
                input=payload_pb2.Payload(data=converter.encode_args(args)),
            ),
        )
    )
    return pending.delivered


def resolve(
    sent: dict[int, PendingSignal], job: workflow_task_pb2.ResolveSignalExternalJob
) -> None:
    pending = sent.pop(job.seq, None)
    if pending is None:
        raise LookupError(f"signal resolution for unknown seq {job.seq}")
    if pending.delivered.done():
        return
    if job.HasField("failure"):
        pending.delivered.set_exception(
            ExternalSignalError(
                f"signal {pending.signal_name!r} to workflow {pending.workflow_id!r} "
                f"(seq {job.seq}) was not delivered: {job.failure.type}: {job.failure.message}",
                workflow_id=pending.workflow_id,
                reason=job.failure.type,
            )
        )
        return
    pending.delivered.set_result(None)


class ExternalWorkflowHandle:
    """Another run of the namespace, addressed from workflow code."""

    def __init__(self, instance: WorkflowInstance, workflow_id: str, run_id: str) -> None:
        self._instance = instance
        self.id = workflow_id
        self.run_id = run_id

    async def signal(self, signal: Callable[..., Any] | str, *args: Any) -> None:
        """Send ``signal`` (a ``@workflow.signal`` method or its name) with ``args``;
        returns once it was delivered. Raises ExternalSignalError when the run does not
        exist or is closed."""
        await send(self._instance, self.id, self.run_id, signal, args)


def get_external_workflow_handle(workflow_id: str, run_id: str = "") -> ExternalWorkflowHandle:
    """A handle on run ``run_id`` of ``workflow_id`` (its latest run when empty), for
    signalling it from workflow code."""
    from durable_rpc.workflow._api import current

    if not workflow_id:
        raise ValueError("workflow_id is empty")
    return ExternalWorkflowHandle(current(), workflow_id, run_id)
