"""WorkflowService: what clients call to start, drive and inspect runs."""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid

import grpc

from durable_rpc.errors import (
    InvalidArgumentError,
    QueryFailedError,
    QueryTimeoutError,
    UpdateRejectedError,
    UpdateTimeoutError,
    WorkflowNotRunningError,
)
from durable_rpc.run_statuses import STATUS_NAMES, STATUS_VALUES
from durable_rpc.server import _convert, _validate
from durable_rpc.server._admin_service import actor
from durable_rpc.server._handoff import Handoffs
from durable_rpc.server._notify import Notifier
from durable_rpc.server._notify import wait as wait_for_wakeup
from durable_rpc.server._queries import QueryRelay
from durable_rpc.server._workflow_batch import WorkflowBatchMixin
from durable_rpc.server._workflow_redrive import WorkflowRedriveMixin
from durable_rpc.server._workflow_streams import WorkflowStreamsMixin
from durable_rpc.store import (
    DirectClaim,
    RunInfo,
    StartOptions,
    Store,
)
from durable_rpc.telemetry import current_trace_context
from durable_rpc.v1 import (
    history_pb2,
    payload_pb2,
    search_attributes_pb2,
    service_pb2,
    service_pb2_grpc,
)

log = logging.getLogger("durable_rpc.server.admin")

DEFAULT_RESULT_WAIT_S = 30.0
MAX_RESULT_WAIT_S = 60.0
DEFAULT_HISTORY_PAGE = 1000
MAX_HISTORY_PAGE = 10_000
DEFAULT_LIST_PAGE = 100
MAX_LIST_PAGE = 1000
DEFAULT_QUERY_TIMEOUT_S = 10.0
MAX_QUERY_TIMEOUT_S = 60.0
DEFAULT_UPDATE_WAIT_S = 30.0
MAX_UPDATE_WAIT_S = 60.0
# While an update waits for acceptance or completion, its state is re-read at least this
# often (a wake-up from a worker's completion is usually faster); a waiting request also
# re-queues a workflow task for its run then (a no-op when one is queued or leased).
UPDATE_RECHECK_S = 0.5


def _info(run: RunInfo) -> service_pb2.WorkflowInfo:
    return service_pb2.WorkflowInfo(
        workflow_id=run.workflow_id,
        run_id=run.run_id,
        workflow_type=run.workflow_type,
        workflow_version=run.workflow_version,
        task_queue=run.task_queue,
        status=STATUS_VALUES[run.status],
        start_time=_convert.timestamp(run.start_time_ms),
        close_time=_convert.timestamp(run.close_time_ms),
        history_length=run.history_length,
        history_size_bytes=run.history_size_bytes,
        memo=search_attributes_pb2.Memo.FromString(run.memo or b""),
        search_attributes=search_attributes_pb2.SearchAttributes.FromString(
            run.search_attributes or b""
        ),
    )


def _start_options(
    request: (
        service_pb2.StartWorkflowRequest
        | service_pb2.SignalWithStartWorkflowRequest
        | service_pb2.UpdateWithStartWorkflowRequest
    ),
) -> StartOptions:
    def ms(field: str) -> int | None:
        if not request.HasField(field):  # type: ignore[arg-type]
            return None
        value: int = getattr(request, field).ToMilliseconds()
        if value < 0:
            raise InvalidArgumentError(f"{field} must not be negative")
        return value

    return StartOptions(
        memo=request.memo.SerializeToString() if request.HasField("memo") else None,
        search_attributes=(
            request.search_attributes.SerializeToString()
            if request.HasField("search_attributes")
            else None
        ),
        execution_timeout_ms=ms("execution_timeout"),
        run_timeout_ms=ms("run_timeout"),
        # Checked by the store (INVALID_PRIORITY, INVALID_FAIRNESS_KEY): unset = default.
        priority=request.priority if request.HasField("priority") else None,
        fairness_key=request.fairness_key or None,
        # Only StartWorkflow carries a concurrency key.
        concurrency_key=(
            request.concurrency_key or None
            if isinstance(request, service_pb2.StartWorkflowRequest)
            else None
        ),
    )


def _update_wait_s(
    request: service_pb2.UpdateWorkflowRequest | service_pb2.UpdateWithStartWorkflowRequest,
) -> float:
    if not request.HasField("timeout"):
        return DEFAULT_UPDATE_WAIT_S
    timeout = request.timeout.ToMilliseconds() / 1000
    if not 0 < timeout <= MAX_UPDATE_WAIT_S:
        raise InvalidArgumentError(f"timeout must be in (0, {MAX_UPDATE_WAIT_S:g}s]")
    return timeout


def _page_token(value: int) -> bytes:
    return str(value).encode() if value else b""


def _parse_page_token(token: bytes) -> int:
    return _validate.page_token("next_page_token", token) or 0


def _status_filter(number: service_pb2.WorkflowStatus.ValueType) -> str | None:
    """A list or count request's status (0: any) as the store's name."""
    if not number:
        return None
    name = STATUS_NAMES.get(number)
    if name is None:
        raise InvalidArgumentError(f"unknown status {number}")
    return name


def _list_cursor(token: bytes) -> str | None:
    cursor = _validate.page_token("next_page_token", token)
    return None if cursor is None else str(cursor)


class WorkflowService(
    WorkflowRedriveMixin,
    WorkflowBatchMixin,
    WorkflowStreamsMixin,
    service_pb2_grpc.WorkflowServiceServicer,
):
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        handoffs: Handoffs | None = None,
        workflow_task_lease_ms: int = 0,
    ) -> None:
        self._store = store
        self._notifier = notifier
        # Direct dispatch of a new run's first task to a waiting poll (_handoff.py).
        self._handoffs = handoffs
        self._workflow_task_lease_ms = workflow_task_lease_ms
        self._queries = QueryRelay(store, notifier)

    async def StartWorkflow(
        self, request: service_pb2.StartWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.StartWorkflowResponse:
        ns = _validate.namespace(request.namespace)
        arguments = (
            ns,
            _validate.name("workflow_id", request.workflow_id),
            _validate.name("workflow_type", request.workflow_type),
            _validate.name("workflow_version", request.workflow_version or "1"),
            _validate.name("task_queue", request.task_queue),
            _validate.payload_bytes("input", request.input, has=request.HasField("input")),
            _validate.name("request_id", request.request_id or uuid.uuid4().hex),
            # The server span of this call (a child of the caller's, when it sent one).
            current_trace_context(),
            _start_options(request),
        )
        handoffs = self._handoffs
        reservation = None
        if handoffs is not None and self._workflow_task_lease_ms > 0:
            reservation = handoffs.reserve((ns, request.task_queue, "workflow"))
        if handoffs is None or reservation is None:
            result = await self._store.start_workflow(*arguments)
            return service_pb2.StartWorkflowResponse(run_id=result.run_id, started=result.started)
        started = asyncio.ensure_future(
            self._store.start_workflow(
                *arguments,
                claim_for=DirectClaim(reservation.worker_id, self._workflow_task_lease_ms),
            )
        )
        # Settled when the start ends, even if this call is cancelled first (the caller
        # went away): the reserved poll gets the task or is woken, and a task nobody can
        # take any more goes back to the queue instead of waiting out its lease.
        started.add_done_callback(functools.partial(handoffs.settle, ns, reservation))
        result = await asyncio.shield(started)
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
            _start_options(request),
        )
        return service_pb2.SignalWithStartWorkflowResponse(
            run_id=result.run_id, started=result.started, delivered=result.delivered
        )

    async def CancelWorkflow(
        self, request: service_pb2.CancelWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.CancelWorkflowResponse:
        cleanup_timeout_ms = _validate.cleanup_timeout_ms(request)
        await self._store.request_cancel(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            request.run_id or None,
            request.reason,
            cleanup_timeout_ms,
        )
        return service_pb2.CancelWorkflowResponse()

    async def TerminateWorkflow(
        self, request: service_pb2.TerminateWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.TerminateWorkflowResponse:
        namespace = _validate.namespace(request.namespace)
        workflow_id = _validate.name("workflow_id", request.workflow_id)
        await self._store.terminate(namespace, workflow_id, request.run_id or None, request.reason)
        # An operator's action: logged with who did it (the key's id and name, no secret).
        log.info("workflow %r in %r terminated by %s", workflow_id, namespace, actor())
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
            definition_unavailable_reason=description.definition_unavailable_reason,
            history_warning=description.history_warning,
            stuck_reason=description.stuck_reason,
            build_id=description.build_id,
            redriven_from_run_id=description.redriven_from_run_id,
            redriven_by_run_id=description.redriven_by_run_id,
            priority=description.priority,
            fairness_key=description.fairness_key,
        )
        for activity in description.pending_activities:
            response.pending_activities.add(
                seq=activity.seq,
                activity_type=activity.activity_type,
                state=activity.state,
                attempt=activity.attempt,
                last_failure=_convert.failure(activity.last_failure),
                worker_id=activity.worker_id or "",
                next_attempt_time=_convert.timestamp(activity.next_attempt_ms),
                lease_expire_time=_convert.timestamp(activity.lease_expires_ms),
                heartbeat_details=_convert.payload(activity.heartbeat_details),
                session_id=activity.session_id or "",
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
                    outcome = self._notifier.outcome_of(
                        ns, outcome.run_id
                    ) or await self._store.get_outcome(ns, workflow_id, outcome.run_id)
        finally:
            if closed is not None:
                closed.cancel()
        return service_pb2.GetWorkflowResultResponse(
            run_id=outcome.run_id,
            status=STATUS_VALUES[outcome.status],
            result=_convert.payload(outcome.result),
            failure=_convert.failure(outcome.failure),
            next_run_id=outcome.next_run_id or "",
        )

    async def ListWorkflows(
        self, request: service_pb2.ListWorkflowsRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.ListWorkflowsResponse:
        size = request.page_size or DEFAULT_LIST_PAGE
        if not 0 < size <= MAX_LIST_PAGE:
            raise InvalidArgumentError(f"page_size must be in 1..{MAX_LIST_PAGE}")
        runs, cursor = await self._store.list_runs(
            _validate.namespace(request.namespace),
            _status_filter(request.status),
            request.workflow_type or None,
            request.started_after.ToMilliseconds() if request.HasField("started_after") else None,
            request.started_before.ToMilliseconds() if request.HasField("started_before") else None,
            size,
            _list_cursor(request.next_page_token),
            request.query or None,
        )
        return service_pb2.ListWorkflowsResponse(
            workflows=[_info(run) for run in runs],
            next_page_token=cursor.encode() if cursor else b"",
        )

    async def CountWorkflows(
        self, request: service_pb2.CountWorkflowsRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.CountWorkflowsResponse:
        counts = await self._store.count_runs(
            _validate.namespace(request.namespace),
            _status_filter(request.status),
            request.workflow_type or None,
            request.started_after.ToMilliseconds() if request.HasField("started_after") else None,
            request.started_before.ToMilliseconds() if request.HasField("started_before") else None,
            request.query or None,
        )
        return service_pb2.CountWorkflowsResponse(
            counts=[
                service_pb2.WorkflowStatusCount(status=number, count=counts[name])
                for name, number in STATUS_VALUES.items()
                if counts.get(name)
            ],
            total=sum(counts.values()),
        )

    async def QueryWorkflow(
        self, request: service_pb2.QueryWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.QueryWorkflowResponse:
        ns = _validate.namespace(request.namespace)
        workflow_id = _validate.name("workflow_id", request.workflow_id)
        query_name = _validate.name("query_name", request.query_name)
        input_data = _validate.payload_bytes("input", request.input, has=request.HasField("input"))
        timeout = DEFAULT_QUERY_TIMEOUT_S
        if request.HasField("timeout"):
            timeout = request.timeout.ToMilliseconds() / 1000
            if not 0 < timeout <= MAX_QUERY_TIMEOUT_S:
                raise InvalidArgumentError(f"timeout must be in (0, {MAX_QUERY_TIMEOUT_S:g}s]")
        run = (await self._store.describe(ns, workflow_id, request.run_id or None)).info
        # The whole history, read like GetWorkflowHistory (nothing is written).
        events: list[bytes] = []
        while True:
            page = await self._store.get_history(
                ns, workflow_id, run.run_id, len(events), MAX_HISTORY_PAGE
            )
            events.extend(page.events)
            if not page.has_more:
                break
        task = service_pb2.PollQueryTaskResponse(
            workflow_id=run.workflow_id,
            run_id=run.run_id,
            workflow_type=run.workflow_type,
            workflow_version=run.workflow_version,
            query_name=query_name,
            input=_convert.payload(input_data),
            history=_convert.history(events),
            workflow_time=_convert.timestamp(await self._store.now_ms()),
        )
        answer = await self._queries.ask(ns, run.task_queue, task, timeout)
        if answer is None:
            raise QueryTimeoutError(
                f"no worker answered query {query_name!r} of workflow {workflow_id} "
                f"within {timeout:g}s (is a worker polling task queue {run.task_queue!r} "
                f"with workflow {run.workflow_type!r} version {run.workflow_version!r}?)"
            )
        if answer.WhichOneof("answer") == "failure":
            failure = answer.failure
            raise QueryFailedError(
                f"query {query_name!r} of workflow {workflow_id} failed: "
                f"{failure.type}: {failure.message}"
            )
        return service_pb2.QueryWorkflowResponse(run_id=run.run_id, result=answer.result)

    async def UpdateWorkflow(
        self, request: service_pb2.UpdateWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.UpdateWorkflowResponse:
        ns = _validate.namespace(request.namespace)
        workflow_id = _validate.name("workflow_id", request.workflow_id)
        update_name = _validate.name("update_name", request.update_name)
        input_data = _validate.payload_bytes("input", request.input, has=request.HasField("input"))
        update_id = _validate.name("update_id", request.update_id or uuid.uuid4().hex)
        timeout = _update_wait_s(request)
        run_id = (await self._store.describe(ns, workflow_id, request.run_id or None)).info.run_id
        return await self._await_update(
            ns,
            workflow_id,
            run_id,
            update_id,
            update_name,
            input_data,
            request.wait_for or service_pb2.UPDATE_STAGE_COMPLETED,
            timeout,
        )

    async def UpdateWithStartWorkflow(
        self,
        request: service_pb2.UpdateWithStartWorkflowRequest,
        context: grpc.aio.ServicerContext,
    ) -> service_pb2.UpdateWithStartWorkflowResponse:
        ns = _validate.namespace(request.namespace)
        workflow_id = _validate.name("workflow_id", request.workflow_id)
        update_name = _validate.name("update_name", request.update_name)
        update_input = _validate.payload_bytes(
            "update_input", request.update_input, has=request.HasField("update_input")
        )
        update_id = _validate.name("update_id", request.update_id or uuid.uuid4().hex)
        timeout = _update_wait_s(request)
        started = await self._store.update_with_start(
            ns,
            workflow_id,
            _validate.name("workflow_type", request.workflow_type),
            _validate.name("workflow_version", request.workflow_version or "1"),
            _validate.name("task_queue", request.task_queue),
            _validate.payload_bytes("input", request.input, has=request.HasField("input")),
            update_id,
            update_name,
            update_input,
            current_trace_context(),
            _start_options(request),
        )
        update = await self._await_update(
            ns,
            workflow_id,
            started.run_id,
            update_id,
            update_name,
            update_input,
            request.wait_for or service_pb2.UPDATE_STAGE_COMPLETED,
            timeout,
        )
        return service_pb2.UpdateWithStartWorkflowResponse(started=started.started, update=update)

    async def _await_update(
        self,
        ns: str,
        workflow_id: str,
        run_id: str,
        update_id: str,
        update_name: str,
        input_data: bytes,
        stage: int,
        timeout: float,
    ) -> service_pb2.UpdateWorkflowResponse:
        """Requests the update on the run (again, idempotently, while it is not accepted)
        and waits until it reaches ``stage``, is rejected, or ``timeout`` passes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            # Registered before reading, so a change in between is not missed.
            changed = self._notifier.changed_updates.register((ns, update_id))
            try:
                # History is the truth for accepted and completed updates; pending
                # requests and rejections are kept in the store (store/_ops_updates.py).
                status, accepted, completed = await self._update_state(
                    ns, workflow_id, run_id, update_id
                )
                response = service_pb2.UpdateWorkflowResponse(run_id=run_id, update_id=update_id)
                if completed is not None:
                    response.stage = service_pb2.UPDATE_STAGE_COMPLETED
                    if completed.HasField("failure"):
                        response.failure.CopyFrom(completed.failure)
                    else:
                        response.result.CopyFrom(completed.result)
                    return response
                if accepted and stage == service_pb2.UPDATE_STAGE_ACCEPTED:
                    response.stage = service_pb2.UPDATE_STAGE_ACCEPTED
                    return response
                rejection = (
                    None if accepted else await self._store.update_rejection(ns, run_id, update_id)
                )
                if rejection is not None:
                    failure = payload_pb2.Failure.FromString(rejection)
                    raise UpdateRejectedError(
                        f"update {update_name!r} ({update_id}) of workflow {workflow_id} was "
                        f"rejected: {failure.type}: {failure.message}"
                    )
                if status != "running":
                    await self._store.forget_update(ns, run_id, update_id)
                    what = "completed" if accepted else "accepted"
                    raise WorkflowNotRunningError(
                        f"run {run_id} is {status}: update {update_id} was never {what}"
                    )
                if not accepted:
                    # Held for the run's workflow tasks (idempotent by id), with a task
                    # queued to deliver it (none when one is queued or running: a running
                    # one's completion is followed by this re-check).
                    await self._store.request_update(ns, run_id, update_id, update_name, input_data)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    what = "completed" if accepted else "accepted"
                    raise UpdateTimeoutError(
                        f"update {update_name!r} ({update_id}) of workflow {workflow_id} was "
                        f"not {what} within {timeout:g}s (is a worker polling task queue "
                        "of the run? retry with the same update_id)"
                    )
                await wait_for_wakeup(changed, min(remaining, UPDATE_RECHECK_S))
            finally:
                changed.cancel()

    async def _update_state(
        self, namespace: str, workflow_id: str, run_id: str, update_id: str
    ) -> tuple[str, bool, history_pb2.UpdateCompleted | None]:
        """(run status, accepted, completion) of ``update_id`` as recorded in history."""
        status = (await self._store.describe(namespace, workflow_id, run_id)).info.status
        accepted = False
        read = 0
        while True:
            page = await self._store.get_history(
                namespace, workflow_id, run_id, read, MAX_HISTORY_PAGE
            )
            read += len(page.events)
            for event in _convert.history(page.events).events:
                kind = event.WhichOneof("attributes")
                if kind == "update_accepted" and event.update_accepted.update_id == update_id:
                    accepted = True
                elif kind == "update_completed" and event.update_completed.update_id == update_id:
                    return status, True, event.update_completed
            if not page.has_more:
                return status, accepted, None
