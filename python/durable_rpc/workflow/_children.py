"""Child workflows, as workflow code sees them.

``start_child_workflow`` emits a StartChildWorkflow command (a fresh seq; replay
matches the child type and id) and waits for the server's answer, recorded in the
parent's history in the same transaction: ChildWorkflowStarted (the handle gets the
child's run id) or ChildWorkflowStartFailed (:class:`ChildWorkflowStartError`). The
child's close reaches the parent as a ChildWorkflow* event: the handle's result, or
:class:`ChildWorkflowError` with the child's failure as cause.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from durable_rpc import converter, payload
from durable_rpc.activity._errors import ApplicationError
from durable_rpc.activity._failure import application_error_from_failure
from durable_rpc.search_attributes import memo_to_proto
from durable_rpc.search_attributes import to_proto as sa_to_proto
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from durable_rpc.workflow._external import send
from durable_rpc.workflow._retry import RetryPolicy

if TYPE_CHECKING:
    from durable_rpc.workflow._runtime import WorkflowInstance

_R = TypeVar("_R")


class ParentClosePolicy(enum.Enum):
    """What happens to an open child when its parent closes (in the parent's closing
    transaction)."""

    #: The child is terminated (the default).
    TERMINATE = "TERMINATE"
    #: The child gets a cancellation request.
    REQUEST_CANCEL = "REQUEST_CANCEL"
    #: The child keeps running.
    ABANDON = "ABANDON"


class ChildWorkflowError(Exception):
    """A child workflow closed without a result. ``status`` is "failed", "cancelled",
    "terminated" or "timed_out"; ``cause`` is the child's failure as an
    :class:`ApplicationError`."""

    failure_type = "ChildWorkflowError"

    def __init__(
        self,
        message: str,
        *,
        seq: int,
        workflow_type: str,
        workflow_id: str,
        run_id: str,
        status: str,
        cause: ApplicationError,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.seq = seq
        self.workflow_type = workflow_type
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.status = status
        self.cause = cause
        self.__cause__ = cause


class ChildWorkflowStartError(Exception):
    """The child could not be started; ``reason`` is e.g. "WORKFLOW_ALREADY_STARTED"
    (a run of the child's id is open)."""

    failure_type = "ChildWorkflowStartError"

    def __init__(
        self, message: str, *, seq: int, workflow_type: str, workflow_id: str, reason: str
    ) -> None:
        super().__init__(message)
        self.message = message
        self.seq = seq
        self.workflow_type = workflow_type
        self.workflow_id = workflow_id
        self.reason = reason


@dataclass
class PendingChild:
    seq: int
    workflow_type: str
    workflow_id: str
    result_hint: Any
    started: asyncio.Future[str]
    result: asyncio.Future[Any]
    run_id: str = ""
    cancel_requested: bool = False


class ChildWorkflowHandle(Generic[_R]):
    """A started child workflow: ``await handle`` (or ``await handle.result()``) for its
    result; ``handle.cancel()`` asks it to cancel."""

    def __init__(self, instance: WorkflowInstance, pending: PendingChild) -> None:
        self._instance = instance
        self._pending = pending

    @property
    def id(self) -> str:
        return self._pending.workflow_id

    @property
    def run_id(self) -> str:
        """The run the child started with (a child that continues-as-new keeps going
        under new run ids; it is still the same child)."""
        return self._pending.run_id

    @property
    def seq(self) -> int:
        return self._pending.seq

    async def result(self) -> _R:
        value: _R = await asyncio.shield(self._pending.result)
        return value

    def __await__(self) -> Generator[Any, None, _R]:
        return self.result().__await__()

    async def signal(self, signal: Callable[..., Any] | str, *args: Any) -> None:
        """Send ``signal`` to the child (its latest run: a child that continued-as-new
        gets it too); returns once delivered. Raises ExternalSignalError when the child
        already closed."""
        await send(self._instance, self.id, "", signal, args)

    def cancel(self) -> None:
        """Request cancellation of the child (a RequestCancelChildWorkflow command; the
        child gets CancelRequested). Once per child; a no-op once it closed."""
        pending = self._pending
        if pending.cancel_requested or pending.result.done():
            return
        pending.cancel_requested = True
        self._instance._emit(
            workflow_task_pb2.Command(
                seq=pending.seq,
                request_cancel_child_workflow=workflow_task_pb2.RequestCancelChildWorkflow(
                    child_seq=pending.seq
                ),
            )
        )


def resolve_start(
    children: dict[int, PendingChild], job: workflow_task_pb2.ResolveChildWorkflowStartJob
) -> None:
    pending = children.get(job.seq)
    if pending is None:
        raise LookupError(f"child workflow start resolution for unknown seq {job.seq}")
    if pending.started.done():
        return
    if job.HasField("failure"):
        children.pop(job.seq, None)
        pending.started.set_exception(
            ChildWorkflowStartError(
                f"child workflow {pending.workflow_type!r} id {pending.workflow_id!r} "
                f"(seq {job.seq}) could not start: {job.failure.type}: {job.failure.message}",
                seq=job.seq,
                workflow_type=pending.workflow_type,
                workflow_id=pending.workflow_id,
                reason=job.failure.type,
            )
        )
        return
    pending.run_id = job.run_id
    pending.started.set_result(job.run_id)


def resolve_result(
    children: dict[int, PendingChild], job: workflow_task_pb2.ResolveChildWorkflowJob
) -> None:
    pending = children.pop(job.seq, None)
    if pending is None:
        raise LookupError(f"child workflow resolution for unknown seq {job.seq}")
    if pending.result.done():
        return
    if job.WhichOneof("outcome") == "completed":
        try:
            value = converter.decode(job.completed.data, pending.result_hint)
        except payload.PayloadError as exc:
            pending.result.set_exception(exc)
        else:
            pending.result.set_result(value)
        return
    failure: payload_pb2.Failure = job.failed
    pending.result.set_exception(
        ChildWorkflowError(
            f"child workflow {pending.workflow_type!r} id {pending.workflow_id!r} "
            f"(seq {job.seq}) {job.status}: {failure.type}: {failure.message}",
            seq=job.seq,
            workflow_type=pending.workflow_type,
            workflow_id=pending.workflow_id,
            run_id=job.run_id or pending.run_id,
            status=job.status,
            cause=application_error_from_failure(failure),
        )
    )


@dataclass(frozen=True)
class ChildStartOptions:
    """Start options of a child run (as a client's start_workflow takes them)."""

    execution_timeout: timedelta | None = None
    run_timeout: timedelta | None = None
    memo: Mapping[str, Any] | None = None
    search_attributes: Mapping[str, Any] | None = None
    retry_policy: RetryPolicy | None = None

    def apply(self, spec: workflow_task_pb2.StartChildWorkflow) -> None:
        for name, value in (
            ("execution_timeout", self.execution_timeout),
            ("run_timeout", self.run_timeout),
        ):
            if value is not None:
                if value < timedelta(0):
                    raise ValueError(f"{name} must not be negative")
                getattr(spec, name).FromTimedelta(value)
        if self.memo:
            spec.memo.CopyFrom(memo_to_proto(self.memo))
        if self.search_attributes:
            spec.search_attributes.CopyFrom(sa_to_proto(self.search_attributes))
        if self.retry_policy is not None:
            spec.retry_policy.CopyFrom(self.retry_policy.to_proto())


def start(
    instance: WorkflowInstance,
    workflow: Callable[..., Any] | str,
    args: tuple[Any, ...],
    *,
    workflow_id: str | None,
    task_queue: str | None,
    parent_close_policy: ParentClosePolicy,
    result_type: Any,
    options: ChildStartOptions = ChildStartOptions(),
) -> PendingChild:
    """Emits StartChildWorkflow (taking the next seq) and registers the pending child."""
    workflow_type, version, hint = child_ref(workflow)
    seq = instance._take_seq()
    if workflow_id is None:
        info = instance.current_info()
        workflow_id = f"{info.workflow_id}/child-{seq}"
    pending = PendingChild(
        seq=seq,
        workflow_type=workflow_type,
        workflow_id=workflow_id,
        result_hint=result_type if result_type is not None else hint,
        started=instance.loop.create_future(),
        result=instance.loop.create_future(),
    )
    spec = workflow_task_pb2.StartChildWorkflow(
        workflow_type=workflow_type,
        workflow_version=version,
        workflow_id=workflow_id,
        task_queue=task_queue or "",
        input=payload_pb2.Payload(data=converter.encode_args(args)),
        parent_close_policy=parent_close_policy.value,
    )
    options.apply(spec)
    instance._children[seq] = pending
    instance._emit(workflow_task_pb2.Command(seq=seq, start_child_workflow=spec))
    return pending


def child_ref(target: Callable[..., Any] | str) -> tuple[str, str, Any]:
    """(workflow type, version, result hint) of ``Child.run`` or a type name."""
    from durable_rpc.client._refs import workflow_ref

    return workflow_ref(target)
