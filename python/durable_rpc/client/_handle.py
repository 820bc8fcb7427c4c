"""A handle on one workflow run: result, signal, cancel, terminate, describe, history."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from google.protobuf import duration_pb2

from durable_rpc import converter
from durable_rpc.client._errors import (
    WorkflowCancelledError,
    WorkflowFailureError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
    WorkflowUpdateFailedError,
)
from durable_rpc.client._refs import query_ref, signal_name, update_ref
from durable_rpc.client._streams import WorkflowStream
from durable_rpc.errors import UpdateTimeoutError
from durable_rpc.run_statuses import STATUS_NAMES
from durable_rpc.search_attributes import from_proto as sa_from_proto
from durable_rpc.search_attributes import memo_from_proto
from durable_rpc.v1 import history_pb2, payload_pb2, service_pb2

if TYPE_CHECKING:
    from durable_rpc.client._client import Client

RESULT_POLL_S = 30


def _time(ts: Any, present: bool) -> dt.datetime | None:
    return ts.ToDatetime(tzinfo=dt.UTC) if present else None


@dataclasses.dataclass(frozen=True)
class WorkflowInfo:
    workflow_id: str
    run_id: str
    workflow_type: str
    workflow_version: str
    task_queue: str
    status: str
    start_time: dt.datetime | None
    close_time: dt.datetime | None
    history_length: int
    memo: dict[str, Any] = dataclasses.field(default_factory=dict)
    search_attributes: dict[str, Any] = dataclasses.field(default_factory=dict)


def info_from_proto(info: service_pb2.WorkflowInfo) -> WorkflowInfo:
    return WorkflowInfo(
        workflow_id=info.workflow_id,
        run_id=info.run_id,
        workflow_type=info.workflow_type,
        workflow_version=info.workflow_version,
        task_queue=info.task_queue,
        status=STATUS_NAMES.get(info.status, "unspecified"),
        start_time=_time(info.start_time, info.HasField("start_time")),
        close_time=_time(info.close_time, info.HasField("close_time")),
        history_length=info.history_length,
        memo=memo_from_proto(info.memo),
        search_attributes=sa_from_proto(info.search_attributes),
    )


@dataclasses.dataclass(frozen=True)
class WorkflowDescription:
    info: WorkflowInfo
    pending_activities: list[service_pb2.PendingActivity]
    last_workflow_task_failure: payload_pb2.Failure | None
    workflow_task_attempt: int
    definition_available: bool
    #: Why nothing runs an open run whose definition is unavailable ('' otherwise).
    definition_unavailable_reason: str = ""
    #: For an open run that makes no progress: what it waits for, in one sentence.
    stuck_reason: str = ""
    #: The build the run is pinned to ('' unversioned, or not decided yet).
    build_id: str = ""
    #: Redrive links: the failed run this one continues, and the run that continues it.
    redriven_from_run_id: str = ""
    redriven_by_run_id: str = ""
    #: The run's claim priority (1 most urgent .. 5) and fairness key ('' none).
    priority: int = 3
    fairness_key: str = ""


@dataclasses.dataclass(frozen=True)
class WorkflowRedriveResult:
    """A new run continuing a failed run from its recorded activity boundary."""

    #: The new run.
    handle: WorkflowHandle
    #: The failed run's events the new run starts from (1..this one, less the activity
    #: failures no kept decision saw).
    resumed_after_event_id: int
    #: Completed activities the new run keeps: their results replay, they never run again.
    kept_activities: int
    #: False when this request id had already redriven the run (the same new run).
    started: bool


class WorkflowHandle:
    def __init__(
        self, client: Client, workflow_id: str, run_id: str | None, result_type: Any = Any
    ) -> None:
        self.client = client
        self.workflow_id = workflow_id
        self.run_id = run_id
        self.result_type = result_type

    def __repr__(self) -> str:
        return f"WorkflowHandle(workflow_id={self.workflow_id!r}, run_id={self.run_id!r})"

    async def result(self, *, timeout: float | None = None, follow_runs: bool = True) -> Any:
        """Wait for the run to close; its typed result, or the matching outcome error.

        A run that continued as new is followed to its successor, and so on: the result
        is the last run's (``follow_runs=False`` stops at this handle's run and returns
        None for a run that continued as new).
        """
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        current_run = self.run_id
        while True:
            wait = RESULT_POLL_S if deadline is None else max(0.0, deadline - loop.time())
            request = service_pb2.GetWorkflowResultRequest(
                namespace=self.client.namespace,
                workflow_id=self.workflow_id,
                run_id=current_run or "",
                wait_timeout=duration_pb2.Duration(seconds=int(wait), nanos=int((wait % 1) * 1e9)),
            )
            response = await self.client.call(
                self.client.workflow_service.GetWorkflowResult, request, timeout=wait + 30
            )
            status = STATUS_NAMES.get(response.status, "unspecified")
            run_id = response.run_id
            if status == "completed":
                data = response.result.data if response.HasField("result") else b""
                return converter.decode(data, self.result_type) if data else None
            if status == "failed":
                raise WorkflowFailureError(self.workflow_id, run_id, response.failure)
            if status == "cancelled":
                raise WorkflowCancelledError(self.workflow_id, run_id, "workflow was cancelled")
            if status == "terminated":
                raise WorkflowTerminatedError(self.workflow_id, run_id, "workflow was terminated")
            if status == "timed_out":
                raise WorkflowTimedOutError(self.workflow_id, run_id, "workflow timed out")
            if status == "continued_as_new":
                if not follow_runs:
                    return None
                current_run = response.next_run_id
                continue
            if deadline is not None and loop.time() >= deadline:
                raise TimeoutError(f"workflow {self.workflow_id} still running after {timeout}s")

    async def signal(
        self, signal: Callable[..., Any] | str, *args: Any, request_id: str | None = None
    ) -> bool:
        """Deliver a signal; False when ``request_id`` was already delivered."""
        request = service_pb2.SignalWorkflowRequest(
            namespace=self.client.namespace,
            workflow_id=self.workflow_id,
            run_id=self.run_id or "",
            signal_name=signal_name(signal),
            input=payload_pb2.Payload(data=converter.encode_args(args)),
            request_id=request_id or uuid.uuid4().hex,
        )
        response = await self.client.call(self.client.workflow_service.SignalWorkflow, request)
        return bool(response.delivered)

    def stream(self, name: str, item_type: Any = Any) -> WorkflowStream:
        """The run's message stream ``name``: append, read, subscribe, describe (items
        converted to ``item_type``)."""
        return WorkflowStream(self, name, item_type)

    async def query(
        self,
        query: Callable[..., Any] | str,
        *args: Any,
        result_type: Any = None,
        timeout: float | None = None,
    ) -> Any:
        """Ask a read-only query (``Wf.method`` or its name) of the run, open or closed.

        A worker replays the run and calls the handler; the history is not touched.
        The result is converted to the handler's return annotation (or ``result_type``).
        Raises QueryFailedError (unknown name, the handler raised) or QueryTimeoutError
        (no worker answered within ``timeout``, default 10 s on the server).
        """
        name, hint = query_ref(query)
        request = service_pb2.QueryWorkflowRequest(
            namespace=self.client.namespace,
            workflow_id=self.workflow_id,
            run_id=self.run_id or "",
            query_name=name,
            input=payload_pb2.Payload(data=converter.encode_args(args)),
        )
        if timeout is not None:
            request.timeout.FromMilliseconds(int(timeout * 1000))
        wait = 10.0 if timeout is None else timeout
        response = await self.client.call(
            self.client.workflow_service.QueryWorkflow, request, timeout=wait + 30
        )
        data = response.result.data if response.HasField("result") else b""
        return converter.decode(data, result_type if result_type is not None else hint)

    async def execute_update(
        self,
        update: Callable[..., Any] | str,
        *args: Any,
        update_id: str | None = None,
        result_type: Any = None,
        timeout: float | None = None,
    ) -> Any:
        """Send an update (``Wf.method`` or its name) and wait for its handler to finish.

        Returns the handler's result, converted to its return annotation (or
        ``result_type``). Raises UpdateRejectedError when the validator rejected it
        (nothing recorded), WorkflowUpdateFailedError when the handler raised, and
        UpdateTimeoutError when ``timeout`` (seconds) passed first; without a timeout it
        waits as long as it takes. A repeated ``update_id`` gets the same outcome and
        never runs the handler twice.
        """
        handle = await self.start_update(
            update,
            *args,
            wait_for="completed",
            update_id=update_id,
            result_type=result_type,
            timeout=timeout,
        )
        return await handle.result(timeout=timeout)

    async def start_update(
        self,
        update: Callable[..., Any] | str,
        *args: Any,
        wait_for: Literal["accepted", "completed"] = "accepted",
        update_id: str | None = None,
        result_type: Any = None,
        timeout: float | None = None,
    ) -> WorkflowUpdateHandle:
        """Send an update and wait until it reaches ``wait_for``; a handle whose
        ``result()`` waits for (or returns) its outcome. Raises like execute_update."""
        stage = update_stage(wait_for)
        name, hint = update_ref(update)
        handle = WorkflowUpdateHandle(
            self,
            update_id or uuid.uuid4().hex,
            name,
            converter.encode_args(args),
            result_type if result_type is not None else hint,
        )
        await handle._wait(stage, timeout)
        return handle

    async def cancel(
        self, reason: str = "", *, cleanup_timeout: dt.timedelta | None = None
    ) -> None:
        """Ask the workflow to cancel; its code sees CancelledError at its await points
        (deferred while it is inside ``workflow.shield()``) and reads the request with
        ``workflow.cancellation()``. With ``cleanup_timeout`` the server terminates the
        run (reason CLEANUP_DEADLINE_EXCEEDED) if it is still open that long after the
        request. A run already asked to cancel keeps its first request and deadline."""
        request = service_pb2.CancelWorkflowRequest(
            namespace=self.client.namespace,
            workflow_id=self.workflow_id,
            run_id=self.run_id or "",
            reason=reason,
        )
        if cleanup_timeout is not None:
            request.cleanup_timeout.FromTimedelta(cleanup_timeout)
        await self.client.call(self.client.workflow_service.CancelWorkflow, request)

    async def terminate(self, reason: str = "") -> None:
        """End the run now, without running any more workflow code."""
        await self.client.call(
            self.client.workflow_service.TerminateWorkflow,
            service_pb2.TerminateWorkflowRequest(
                namespace=self.client.namespace,
                workflow_id=self.workflow_id,
                run_id=self.run_id or "",
                reason=reason,
            ),
        )

    async def redrive(self, *, request_id: str | None = None) -> WorkflowRedriveResult:
        """Start a new run continuing this failed run (the latest run of the workflow id
        when the handle names none) from its last completed activity: recorded results
        replay and nothing completed runs again. WorkflowNotFailedError when the run did
        not fail; WorkflowAlreadyStartedError when a run of the id is open or the run was
        already redriven. Idempotent by ``request_id`` (UNAVAILABLE is retried with it)."""
        response = await self.client.call_deduplicated(
            self.client.workflow_service.RedriveWorkflow,
            service_pb2.RedriveWorkflowRequest(
                namespace=self.client.namespace,
                workflow_id=self.workflow_id,
                run_id=self.run_id or "",
                request_id=request_id or uuid.uuid4().hex,
            ),
        )
        return WorkflowRedriveResult(
            handle=WorkflowHandle(self.client, self.workflow_id, response.run_id, self.result_type),
            resumed_after_event_id=response.resumed_after_event_id,
            kept_activities=response.kept_activities,
            started=response.started,
        )

    async def describe(self) -> WorkflowDescription:
        response = await self.client.call(
            self.client.workflow_service.DescribeWorkflow,
            service_pb2.DescribeWorkflowRequest(
                namespace=self.client.namespace,
                workflow_id=self.workflow_id,
                run_id=self.run_id or "",
            ),
        )
        failure = (
            response.last_workflow_task_failure
            if response.HasField("last_workflow_task_failure")
            else None
        )
        return WorkflowDescription(
            info=info_from_proto(response.info),
            pending_activities=list(response.pending_activities),
            last_workflow_task_failure=failure,
            workflow_task_attempt=response.workflow_task_attempt,
            definition_available=response.definition_available,
            definition_unavailable_reason=response.definition_unavailable_reason,
            stuck_reason=response.stuck_reason,
            build_id=response.build_id,
            redriven_from_run_id=response.redriven_from_run_id,
            redriven_by_run_id=response.redriven_by_run_id,
            # 0: a server from before priorities (every run had the default).
            priority=response.priority or 3,
            fairness_key=response.fairness_key,
        )

    async def history(self, *, page_size: int = 1000) -> list[history_pb2.HistoryEvent]:
        """The run's whole history, fetched page by page."""
        events: list[history_pb2.HistoryEvent] = []
        token = b""
        while True:
            response = await self.client.call(
                self.client.workflow_service.GetWorkflowHistory,
                service_pb2.GetWorkflowHistoryRequest(
                    namespace=self.client.namespace,
                    workflow_id=self.workflow_id,
                    run_id=self.run_id or "",
                    page_size=page_size,
                    next_page_token=token,
                ),
            )
            events.extend(response.history.events)
            token = response.next_page_token
            if not token:
                return events


# One UpdateWorkflow call waits at most this long on the server (its maximum is 60 s).
UPDATE_POLL_S = 50.0


def update_stage(wait_for: Literal["accepted", "completed"]) -> service_pb2.UpdateStage.ValueType:
    """The UpdateStage a caller's ``wait_for`` names."""
    if wait_for == "accepted":
        return service_pb2.UPDATE_STAGE_ACCEPTED
    if wait_for == "completed":
        return service_pb2.UPDATE_STAGE_COMPLETED
    raise ValueError("wait_for must be 'accepted' or 'completed'")


class WorkflowUpdateHandle:
    """An update sent to a run: its id and, through :meth:`result`, its outcome."""

    def __init__(
        self, handle: WorkflowHandle, update_id: str, name: str, input_data: bytes, hint: Any
    ) -> None:
        self.workflow_handle = handle
        self.update_id = update_id
        self.name = name
        self._input = input_data
        self._hint = hint
        self._outcome: service_pb2.UpdateWorkflowResponse | None = None

    @classmethod
    def answered(
        cls,
        handle: WorkflowHandle,
        update_id: str,
        name: str,
        input_data: bytes,
        hint: Any,
        response: service_pb2.UpdateWorkflowResponse,
    ) -> WorkflowUpdateHandle:
        """The handle of an update whose first answer (``response``) is already here."""
        update = cls(handle, update_id, name, input_data, hint)
        if response.stage == service_pb2.UPDATE_STAGE_COMPLETED:
            update._outcome = response
        return update

    async def _wait(self, stage: int, timeout: float | None) -> service_pb2.UpdateWorkflowResponse:
        """Ask (again: deduplicated by update id) until ``stage`` is reached. Without a
        timeout, bounded server waits are repeated as long as it takes."""
        handle = self.workflow_handle
        while True:
            wait = UPDATE_POLL_S if timeout is None else timeout
            request = service_pb2.UpdateWorkflowRequest(
                namespace=handle.client.namespace,
                workflow_id=handle.workflow_id,
                run_id=handle.run_id or "",
                update_name=self.name,
                input=payload_pb2.Payload(data=self._input),
                update_id=self.update_id,
                wait_for=stage,  # type: ignore[arg-type]
            )
            request.timeout.FromMilliseconds(int(wait * 1000))
            try:
                response: service_pb2.UpdateWorkflowResponse = await handle.client.call(
                    handle.client.workflow_service.UpdateWorkflow, request, timeout=wait + 30
                )
            except UpdateTimeoutError:
                if timeout is not None:
                    raise
                continue
            if response.stage == service_pb2.UPDATE_STAGE_COMPLETED:
                self._outcome = response
            return response

    async def result(self, *, timeout: float | None = None) -> Any:
        """The handler's result (typed by its return annotation); raises
        WorkflowUpdateFailedError when it raised."""
        outcome = self._outcome
        if outcome is None:
            outcome = await self._wait(service_pb2.UPDATE_STAGE_COMPLETED, timeout)
        if outcome.WhichOneof("outcome") == "failure":
            raise WorkflowUpdateFailedError(
                self.workflow_handle.workflow_id, self.update_id, outcome.failure
            )
        data = outcome.result.data if outcome.HasField("result") else b""
        return converter.decode(data, self._hint)
