"""WorkflowService: what clients call to start, drive and inspect runs."""

from __future__ import annotations

import uuid
from typing import Any

import grpc

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.server import _convert, _validate
from durable_rpc.server._notify import Notifier
from durable_rpc.server._notify import wait as wait_for_wakeup
from durable_rpc.store import RunInfo, Store
from durable_rpc.telemetry import current_trace_context
from durable_rpc.v1 import service_pb2, service_pb2_grpc

DEFAULT_RESULT_WAIT_S = 30.0
MAX_RESULT_WAIT_S = 60.0
DEFAULT_HISTORY_PAGE = 1000
MAX_HISTORY_PAGE = 10_000
DEFAULT_LIST_PAGE = 100
MAX_LIST_PAGE = 1000


def _info(run: RunInfo) -> service_pb2.WorkflowInfo:
    return service_pb2.WorkflowInfo(
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        workflow_type=run.workflow_type,
        workflow_version=run.workflow_version,
        task_queue=run.task_queue,
        status=_convert.STATUS[run.status],
        start_time=_convert.timestamp(run.start_time_ms),
        close_time=_convert.timestamp(run.close_time_ms),
        history_length=run.history_length,
    )


def _page_token(value: int) -> bytes:
    return str(value).encode() if value else b""


def _parse_page_token(token: bytes) -> int:
    if not token:
        return 0
    try:
        return int(token.decode())
    except ValueError as exc:
        raise InvalidArgumentError("next_page_token is not one this server issued") from exc


class WorkflowService(service_pb2_grpc.WorkflowServiceServicer):
    def __init__(self, store: Store, notifier: Notifier) -> None:
        self._store = store
        self._notifier = notifier

    async def StartWorkflow(
        self, request: service_pb2.StartWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.StartWorkflowResponse:
        ns = _validate.namespace(request.namespace)
        result = await self._store.start_workflow(
            ns,
            _validate.name("workflow_id", request.workflow_id),
            _validate.name("workflow_type", request.workflow_type),
            _validate.name("workflow_version", request.workflow_version or "1"),
            _validate.name("task_queue", request.task_queue),
            _validate.payload_bytes("input", request.input, has=request.HasField("input")),
            _validate.name("request_id", request.request_id or uuid.uuid4().hex),
            # The server span of this call (a child of the caller's, when it sent one).
            current_trace_context(),
        )
        return service_pb2.StartWorkflowResponse(run_id=result.run_id, started=result.started)

    async def SignalWorkflow(
        self, request: service_pb2.SignalWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.SignalWorkflowResponse:
        delivered = await self._store.signal_workflow(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            request.run_id or None,
            _validate.name("signal_name", request.signal_name),
            _validate.payload_bytes("input", request.input, has=request.HasField("input")),
            _validate.name("request_id", request.request_id or uuid.uuid4().hex),
        )
        return service_pb2.SignalWorkflowResponse(delivered=delivered)

    async def SignalWithStartWorkflow(
        self,
        request: service_pb2.SignalWithStartWorkflowRequest,
        context: grpc.aio.ServicerContext,
    ) -> service_pb2.SignalWithStartWorkflowResponse:
        result = await self._store.signal_with_start(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            _validate.name("workflow_type", request.workflow_type),
            _validate.name("workflow_version", request.workflow_version or "1"),
            _validate.name("task_queue", request.task_queue),
            _validate.payload_bytes("input", request.input, has=request.HasField("input")),
            _validate.name("signal_name", request.signal_name),
            _validate.payload_bytes(
                "signal_input", request.signal_input, has=request.HasField("signal_input")
            ),
            _validate.name("request_id", request.request_id or uuid.uuid4().hex),
            current_trace_context(),
        )
        return service_pb2.SignalWithStartWorkflowResponse(
            run_id=result.run_id, started=result.started, delivered=result.delivered
        )

    async def CancelWorkflow(
        self, request: service_pb2.CancelWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.CancelWorkflowResponse:
        await self._store.request_cancel(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            request.run_id or None,
            request.reason,
        )
        return service_pb2.CancelWorkflowResponse()

    async def TerminateWorkflow(
        self, request: service_pb2.TerminateWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.TerminateWorkflowResponse:
        await self._store.terminate(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            request.run_id or None,
            request.reason,
        )
        return service_pb2.TerminateWorkflowResponse()

    async def DescribeWorkflow(
        self, request: service_pb2.DescribeWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.DescribeWorkflowResponse:
        description = await self._store.describe(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            request.run_id or None,
        )
        response = service_pb2.DescribeWorkflowResponse(
            info=_info(description.info),
            last_workflow_task_failure=_convert.failure(description.last_workflow_task_failure),
            workflow_task_attempt=description.workflow_task_attempt,
            definition_available=description.definition_available,
        )
        for activity in description.pending_activities:
            response.pending_activities.add(
                seq=activity.seq,
                activity_type=activity.activity_type,
                state=activity.state,
                attempt=activity.attempt,
                last_failure=_convert.failure(activity.last_failure),
                worker_id=activity.worker_id or "",
            )
        return response

    async def GetWorkflowHistory(
        self, request: service_pb2.GetWorkflowHistoryRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.GetWorkflowHistoryResponse:
        size = request.page_size or DEFAULT_HISTORY_PAGE
        if not 0 < size <= MAX_HISTORY_PAGE:
            raise InvalidArgumentError(f"page_size must be in 1..{MAX_HISTORY_PAGE}")
        after = _parse_page_token(request.next_page_token)
        page = await self._store.get_history(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            request.run_id or None,
            after,
            size,
        )
        history = _convert.history(page.events)
        last = history.events[-1].event_id if history.events else after
        return service_pb2.GetWorkflowHistoryResponse(
            history=history,
            next_page_token=_page_token(last) if page.has_more else b"",
            run_id=page.run_id,
        )

    async def GetWorkflowResult(
        self, request: service_pb2.GetWorkflowResultRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.GetWorkflowResultResponse:
        ns = _validate.namespace(request.namespace)
        workflow_id = _validate.name("workflow_id", request.workflow_id)
        wait = DEFAULT_RESULT_WAIT_S
        if request.HasField("wait_timeout"):
            wait = min(request.wait_timeout.ToMilliseconds() / 1000, MAX_RESULT_WAIT_S)
        run_id = request.run_id or None
        # Register for the close before reading, so a close in between is not missed.
        # Without a run id the run is only known after a first read.
        closed = self._notifier.closed_runs.register((ns, run_id)) if run_id else None
        try:
            outcome = await self._store.get_outcome(ns, workflow_id, run_id)
            if outcome.status == "running" and wait > 0:
                if closed is None:
                    closed = self._notifier.closed_runs.register((ns, outcome.run_id))
                    outcome = await self._store.get_outcome(ns, workflow_id, outcome.run_id)
                if outcome.status == "running" and await wait_for_wakeup(closed, wait):
                    outcome = await self._store.get_outcome(ns, workflow_id, outcome.run_id)
        finally:
            if closed is not None:
                closed.cancel()
        return service_pb2.GetWorkflowResultResponse(
            run_id=outcome.run_id,
            status=_convert.STATUS[outcome.status],
            result=_convert.payload(outcome.result),
            failure=_convert.failure(outcome.failure),
        )

    async def ListWorkflows(
        self, request: service_pb2.ListWorkflowsRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.ListWorkflowsResponse:
        size = request.page_size or DEFAULT_LIST_PAGE
        if not 0 < size <= MAX_LIST_PAGE:
            raise InvalidArgumentError(f"page_size must be in 1..{MAX_LIST_PAGE}")
        status: Any = None
        if request.status:
            status = _convert.STATUS_NAME.get(request.status)
            if status is None:
                raise InvalidArgumentError(f"unknown status {request.status}")
        runs, cursor = await self._store.list_runs(
            _validate.namespace(request.namespace),
            status,
            request.workflow_type or None,
            request.started_after.ToMilliseconds() if request.HasField("started_after") else None,
            request.started_before.ToMilliseconds() if request.HasField("started_before") else None,
            size,
            request.next_page_token.decode() if request.next_page_token else None,
        )
        return service_pb2.ListWorkflowsResponse(
            workflows=[_info(run) for run in runs],
            next_page_token=cursor.encode() if cursor else b"",
        )
