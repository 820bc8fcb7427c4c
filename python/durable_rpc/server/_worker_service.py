"""WorkerService: registration, long-poll claims under fenced leases, outcomes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import grpc
from google.protobuf import duration_pb2

from durable_rpc import _protocol
from durable_rpc._rpc_status import status_message
from durable_rpc.auth import Principal
from durable_rpc.errors import (
    DurableRpcError,
    InvalidArgumentError,
    InvalidPayloadError,
    ProtocolVersionUnsupportedError,
)
from durable_rpc.payload import PayloadError
from durable_rpc.server import _convert, _validate
from durable_rpc.server._auth import current_principal
from durable_rpc.server._fingerprints import code_fingerprints
from durable_rpc.server._handoff import Handoffs
from durable_rpc.server._interceptor import internal_error
from durable_rpc.server._metrics import ServerMetrics
from durable_rpc.server._notify import Arrival, Notifier, Wakeup, wait
from durable_rpc.server._poll_replay import PollReplay
from durable_rpc.server._queries import QueryRelay
from durable_rpc.server._session_service import session_message
from durable_rpc.server._task_history import TaskHistoryPages
from durable_rpc.server._validate_message import check_request
from durable_rpc.store import (
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    EagerActivities,
    EagerWorkflowTask,
    InlineWorkflowTask,
    LeaseRef,
    Store,
    TaskKind,
    WorkerCounters,
)
from durable_rpc.v1 import payload_pb2, service_pb2, service_pb2_grpc, workflow_task_pb2

T = TypeVar("T")

WORKER_HEARTBEAT_INTERVAL_S = 10
#: How long a woken poll waits for the has-claimable probe before passing its wake-up on.
PASS_ON_PROBE_TIMEOUT_S = 1.0
MAX_BATCH_OUTCOMES = 1000
log = logging.getLogger(__name__)
# Most activity attempts handed out eagerly with one workflow-task completion.
MAX_EAGER_ACTIVITIES = 100


def _lease(lease: service_pb2.Lease) -> LeaseRef:
    _validate.lease_fields(lease.task_id, lease.worker_id, lease.fencing_token)
    return LeaseRef(
        task_id=lease.task_id, worker_id=lease.worker_id, fencing_token=lease.fencing_token
    )


def _failure_bytes(request_failure: payload_pb2.Failure) -> bytes:
    if request_failure.HasField("details"):
        _validate.payload_bytes("failure.details", request_failure.details, has=True)
    return request_failure.SerializeToString()


def _validate_commands(commands: Sequence[workflow_task_pb2.Command]) -> None:
    """Every payload a command carries must be a valid frame before it is stored."""
    for command in commands:
        for field, value in command.ListFields():
            if hasattr(value, "input") and value.HasField("input"):
                _validate.payload_bytes(f"{field.name}.input", value.input, has=True)
            if hasattr(value, "result") and value.HasField("result"):
                _validate.payload_bytes(f"{field.name}.result", value.result, has=True)
            if field.name == "record_marker" and value.HasField("payload"):
                _validate.payload_bytes(f"{field.name}.payload", value.payload, has=True)
            if field.name == "record_marker" and value.HasField("details"):
                _validate.payload_bytes(f"{field.name}.details", value.details, has=True)
            if field.name == "upsert_memo":
                for key, memo_value in value.memo.fields.items():
                    _validate.payload_bytes(f"upsert_memo.memo[{key!r}]", memo_value, has=True)
            if field.name == "append_to_stream":
                for index, item in enumerate(value.items):
                    _validate.payload_bytes(f"append_to_stream.items[{index}]", item, has=True)


def _eager_activities(
    limit: int, task_queue: str, activity_types: Sequence[str]
) -> EagerActivities | None:
    if limit <= 0:
        return None
    return EagerActivities(
        task_queue=_validate.name("eager_task_queue", task_queue),
        activity_types=frozenset(_validate.name("eager_activity_types", t) for t in activity_types),
        limit=min(limit, MAX_EAGER_ACTIVITIES),
    )


def _activity_task_message(task: ClaimedActivityTask) -> service_pb2.PollActivityTaskResponse:
    response = service_pb2.PollActivityTaskResponse(
        trace_context=task.trace_context,
        task_id=task.task_id,
        fencing_token=task.fencing_token,
        lease_expires_at=_convert.timestamp(task.lease_expires_at_ms),
        workflow_id=task.workflow_id,
        run_id=task.run_id,
        seq=task.seq,
        activity_type=task.activity_type,
        input=_convert.payload(task.input),
        attempt=task.attempt,
        heartbeat_details=_convert.payload(task.heartbeat_details),
    )
    if task.heartbeat_timeout_ms:
        response.heartbeat_timeout.FromMilliseconds(task.heartbeat_timeout_ms)
    if task.start_to_close_timeout_ms:
        response.start_to_close_timeout.FromMilliseconds(task.start_to_close_timeout_ms)
    if task.session is not None:
        response.session.CopyFrom(session_message(task.session))
    return response


def _caller_identity(principal: Principal | None) -> service_pb2.CallerIdentity | None:
    """Who the calling key is, for GetServerInfo (None: authentication is off)."""
    if principal is None:
        return None
    return service_pb2.CallerIdentity(
        key_id=principal.key_id,
        name=principal.name,
        role=principal.role.value,
        namespace=principal.namespace or "",
    )


class WorkerService(service_pb2_grpc.WorkerServiceServicer):
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        *,
        poll_timeout_s: float,
        workflow_task_lease_ms: int,
        shutting_down: asyncio.Event,
        handoffs: Handoffs | None = None,
        metrics: ServerMetrics | None = None,
        auth_required: bool = False,
    ) -> None:
        self._auth_required = auth_required
        self._queries = QueryRelay(store, notifier)
        self._metrics = metrics
        self._store = store
        self._history_pages = TaskHistoryPages(store)
        self._notifier = notifier
        self._poll_timeout_s = poll_timeout_s
        self._workflow_task_lease_ms = workflow_task_lease_ms
        self._shutting_down = shutting_down
        self.handoffs = handoffs or Handoffs(notifier.tasks, store)
        # Each worker's last claimed poll, for a retry whose response was lost.
        self._workflow_polls: PollReplay[service_pb2.PollWorkflowTaskResponse] = PollReplay()
        self._activity_polls: PollReplay[service_pb2.PollActivityTaskResponse] = PollReplay()
        #: Wake-ups being passed on after a successful claim (kept: tasks are weakly held).
        self._passing: set[asyncio.Future[None]] = set()

    async def _pass_on(self, key: tuple[str, str, TaskKind], wakeup: Wakeup) -> None:
        """Passes a wake-up on to the next waiting poll, but only while something is left
        to claim on the queue: otherwise every waiting poll would try in turn, each a claim
        transaction finding nothing (measured: 4.5 a workflow with two replicas, each
        NOTIFY reaching the other replica's idle polls after the task was gone). When the
        store cannot tell, it is passed on: an extra claim is harmless, a lost wake-up is
        not."""
        try:
            # Bounded: a poll must keep to its deadline even if the store is slow to say.
            left = await asyncio.wait_for(
                self._store.has_claimable_task(*key), PASS_ON_PROBE_TIMEOUT_S
            )
        except Exception:  # TimeoutError included
            left = True
        if left:
            self._notifier.tasks.notify(key, wakeup)

    async def _long_poll(
        self,
        key: tuple[str, str, TaskKind],
        claim: Callable[[], Awaitable[T | None]],
        handed_over: Callable[[Arrival], T | None] | None = None,
        worker_id: str | None = None,
        retry_in: Callable[[], float | None] | None = None,
    ) -> T | None:
        """Claim, or wait for a wake-up on `key` and claim again, until the poll timeout.

        The waiter is registered before each claim attempt so an arrival between a
        failed claim and the wait is never missed. Wake-ups go to one poller at a time
        and travel on (see `Waiters` and `Wakeup`): a poller that was woken passes the
        wake-up on after its claim, whether it took a task (one notification may
        announce several) or found nothing its filter lets it take (the arrival is
        someone else's); one that was woken but leaves without claiming (deadline,
        cancelled call) hands it back, so no announced task is left waiting for the next
        notification. Shutdown wakes every waiter (`Notifier.wake_all_pollers`).

        With `handed_over` (workflow tasks, see `_handoff.py`) the waiting poll names
        `worker_id`, so a start may claim its first task for it and hand it over.

        With `retry_in` (activity tasks), an empty claim may name the seconds after
        which it could succeed without any wake-up (a rate limit's next token): the
        wait ends then at the latest, so a held-back task is claimed when it may be
        and no poll spins meanwhile.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._poll_timeout_s
        waiters = self._notifier.tasks
        poller = object()  # this poll, across its registrations (see `Wakeup`)
        wakeup: Wakeup | None = None  # the wake-up this poll holds and has not passed on
        try:
            while not self._shutting_down.is_set():
                arrival = waiters.register(key, poller)
                consumed = False
                try:
                    task = await claim()
                    if wakeup is not None:
                        if task is None:
                            wakeup.empty_handed.add(poller)
                            await self._pass_on(key, wakeup)
                        else:  # the task goes to its worker without waiting for this
                            passing = asyncio.ensure_future(self._pass_on(key, wakeup))
                            self._passing.add(passing)
                            passing.add_done_callback(self._passing.discard)
                        wakeup = None
                    if task is not None:
                        return task
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        return None
                    if retry_in is not None and (due := retry_in()) is not None:
                        remaining = min(remaining, due)
                    if handed_over is not None and worker_id is not None:
                        # Only while waiting: a poll busy claiming takes nothing handed.
                        waiters.name_waiter(key, arrival, worker_id)
                    metrics = self._metrics
                    if metrics is None:
                        await wait(arrival, remaining)
                    else:
                        metrics.poll_waiting(*key, 1)
                        try:
                            await wait(arrival, remaining)
                        finally:
                            metrics.poll_waiting(*key, -1)
                    consumed, wakeup = True, arrival.result()
                    if handed_over is not None and (handed := handed_over(arrival)) is not None:
                        return handed
                finally:
                    missed = None
                    if not consumed and arrival.done() and not arrival.cancelled():
                        missed = arrival.result()
                    if missed is not None:
                        # Woken while busy claiming, then left: the wake-up is not ours.
                        waiters.notify(key, missed)
                    arrival.cancel()
                    if handed_over is not None:
                        # Handed over as this poll was cancelled: give it back.
                        self.handoffs.give_back_leftover(key[0], arrival)
            return None
        finally:
            if wakeup is not None:
                waiters.notify(key, wakeup)

    async def RegisterWorker(
        self, request: service_pb2.RegisterWorkerRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.RegisterWorkerResponse:
        # Before any write: a worker this server cannot serve registers nothing.
        if not _protocol.served(request.protocol_version):
            raise ProtocolVersionUnsupportedError(
                f"the worker speaks protocol {request.protocol_version or 1}; this server "
                f"serves {_protocol.MIN_PROTOCOL_VERSION}..{_protocol.PROTOCOL_VERSION} "
                "(upgrade the older side)"
            )
        capabilities = [_validate.name("capabilities", c) for c in request.capabilities]
        definitions = [
            (
                _validate.name("workflows.name", d.name),
                _validate.name("workflows.version", d.version or "1"),
                _validate.name("workflows.fingerprint", d.fingerprint),
            )
            for d in request.workflows
        ]
        await self._store.register_worker(
            _validate.namespace(request.namespace),
            _validate.name("worker_id", request.worker_id),
            _validate.name("task_queue", request.task_queue),
            definitions,
            [_validate.name("activities", a) for a in request.activities],
            _validate.name("build_id", request.build_id, required=False),
            request.allow_definition_change,
            declared_signals={
                (name, version): [_validate.name("workflows.signals", n) for n in d.signals]
                for (name, version, _), d in zip(definitions, request.workflows, strict=True)
                if d.signals_declared
            },
            fingerprints={
                (name, version): code_fingerprints(d)
                for (name, version, _), d in zip(definitions, request.workflows, strict=True)
            },
        )
        return service_pb2.RegisterWorkerResponse(
            heartbeat_interval=duration_pb2.Duration(seconds=WORKER_HEARTBEAT_INTERVAL_S),
            capabilities=[c for c in capabilities if c in _protocol.SERVER_CAPABILITIES],
            protocol_version=_protocol.PROTOCOL_VERSION,
        )

    async def GetServerInfo(
        self, request: service_pb2.GetServerInfoRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.GetServerInfoResponse:
        return service_pb2.GetServerInfoResponse(
            protocol_version=_protocol.PROTOCOL_VERSION,
            min_protocol_version=_protocol.MIN_PROTOCOL_VERSION,
            capabilities=_protocol.SERVER_CAPABILITIES,
            server_version=_protocol.server_version(),
            auth_required=self._auth_required,
            caller=_caller_identity(current_principal.get()),
        )

    async def WorkerHeartbeat(
        self, request: service_pb2.WorkerHeartbeatRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.WorkerHeartbeatResponse:
        counters = request.counters if request.HasField("counters") else None
        await self._store.worker_heartbeat(
            _validate.namespace(request.namespace),
            _validate.name("worker_id", request.worker_id),
            # Unset (a worker that counts nothing): the last report stays.
            WorkerCounters(
                claims=counters.claims,
                completions=counters.completions,
                failures=counters.failures,
                lease_losses=counters.lease_losses,
                slots_in_use=counters.slots_in_use,
                slots_total=counters.slots_total,
            )
            if counters is not None
            else None,
        )
        return service_pb2.WorkerHeartbeatResponse()

    async def DeregisterWorker(
        self, request: service_pb2.DeregisterWorkerRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.DeregisterWorkerResponse:
        namespace = _validate.namespace(request.namespace)
        worker_id = _validate.name("worker_id", request.worker_id)
        await self._store.deregister_worker(namespace, worker_id)
        self._workflow_polls.forget(namespace, worker_id)
        self._activity_polls.forget(namespace, worker_id)
        return service_pb2.DeregisterWorkerResponse()

    async def PollWorkflowTask(
        self, request: service_pb2.PollWorkflowTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.PollWorkflowTaskResponse:
        ns = _validate.namespace(request.namespace)
        queue = _validate.name("task_queue", request.task_queue)
        worker_id = _validate.name("worker_id", request.worker_id)
        request_id = _validate.name("request_id", request.request_id, required=False)
        replayed = await self._workflow_polls.replay(
            ns, worker_id, request_id, self._store.lease_holds
        )
        if replayed is not None:
            return replayed
        task = await self._long_poll(
            (ns, queue, "workflow"),
            lambda: self._store.claim_workflow_task(
                ns, queue, worker_id, self._workflow_task_lease_ms
            ),
            self.handoffs.take,
            worker_id,
        )
        if task is None:
            return service_pb2.PollWorkflowTaskResponse()
        response = await self._workflow_task(ns, task)
        self._workflow_polls.remember(ns, worker_id, request_id, task.lease, response)
        return response

    async def _workflow_task(
        self, namespace: str, task: ClaimedWorkflowTask
    ) -> service_pb2.PollWorkflowTaskResponse:
        """The message of a workflow task handed to a worker (polled, handed over by a
        start, claimed eagerly), its queue delay and attempt recorded."""
        if self._metrics is not None:
            self._metrics.record_task_queue_delay(
                namespace, task.task_queue, "workflow", task.queue_delay_ms / 1000
            )
            self._metrics.record_workflow_task_attempt(namespace, task.task_queue, task.attempt)
        return await self._history_pages.workflow_task_message(
            namespace, task, self._store.options.history
        )

    def _activity_task(
        self, namespace: str, task_queue: str, task: ClaimedActivityTask
    ) -> service_pb2.PollActivityTaskResponse:
        if self._metrics is not None:
            self._metrics.record_task_queue_delay(
                namespace, task_queue, "activity", task.queue_delay_ms / 1000
            )
        return _activity_task_message(task)

    async def CompleteWorkflowTask(
        self, request: service_pb2.CompleteWorkflowTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.CompleteWorkflowTaskResponse:
        _validate_commands(request.commands)
        rejections = [
            (
                _validate.name("rejected_updates.update_id", rejected.update_id),
                _failure_bytes(rejected.failure),
            )
            for rejected in request.rejected_updates
        ]
        ns = _validate.namespace(request.namespace)
        completion = await self._store.complete_workflow_task_tracked(
            ns,
            _lease(request.lease),
            request.last_seen_event_id,
            list(request.commands),
            request.build_id,
            _eager_activities(
                request.max_eager_activities,
                request.eager_task_queue,
                request.eager_activity_types,
            ),
            rejections,
        )
        eager = request.eager_task_queue  # where eager attempts are claimed (validated)
        response = service_pb2.CompleteWorkflowTaskResponse(
            eager_activities=[
                self._activity_task(ns, eager, task) for task in completion.eager_activities
            ]
        )
        if request.return_appended_events:
            response.appended.CopyFrom(_convert.history(completion.appended_events))
            response.history_length = completion.history_length
        return response

    async def GetWorkflowTaskHistory(
        self,
        request: service_pb2.GetWorkflowTaskHistoryRequest,
        context: grpc.aio.ServicerContext,
    ) -> service_pb2.GetWorkflowTaskHistoryResponse:
        return await self._history_pages.next_page(
            _validate.namespace(request.namespace), request.next_page_token
        )

    async def FailWorkflowTask(
        self, request: service_pb2.FailWorkflowTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.FailWorkflowTaskResponse:
        delay_ms = await self._store.fail_workflow_task(
            _validate.namespace(request.namespace),
            _lease(request.lease),
            _failure_bytes(request.failure),
        )
        response = service_pb2.FailWorkflowTaskResponse()
        if delay_ms is not None:
            response.retry_delay.FromMilliseconds(delay_ms)
        return response

    async def PollActivityTask(
        self, request: service_pb2.PollActivityTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.PollActivityTaskResponse:
        ns = _validate.namespace(request.namespace)
        queue = _validate.name("task_queue", request.task_queue)
        worker_id = _validate.name("worker_id", request.worker_id)
        types = [_validate.name("activity_types", t) for t in request.activity_types]
        request_id = _validate.name("request_id", request.request_id, required=False)
        replayed = await self._activity_polls.replay(
            ns, worker_id, request_id, self._store.lease_holds
        )
        if replayed is not None:
            return replayed
        retry_in_ms: int | None = None

        async def claim() -> ClaimedActivityTask | None:
            nonlocal retry_in_ms
            poll = await self._store.poll_activity_task(ns, queue, worker_id, types)
            retry_in_ms = poll.retry_in_ms
            return poll.task

        task = await self._long_poll(
            (ns, queue, "activity"),
            claim,
            retry_in=lambda: None if retry_in_ms is None else max(retry_in_ms, 1) / 1000,
        )
        if task is None:
            return service_pb2.PollActivityTaskResponse()
        response = self._activity_task(ns, queue, task)
        self._activity_polls.remember(ns, worker_id, request_id, task.lease, response)
        return response

    async def HeartbeatActivityTask(
        self, request: service_pb2.HeartbeatActivityTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.HeartbeatActivityTaskResponse:
        details = None
        if request.HasField("details"):
            details = _validate.payload_bytes("details", request.details, has=True)
        result = await self._store.heartbeat_activity_task(
            _validate.namespace(request.namespace), _lease(request.lease), details
        )
        response = service_pb2.HeartbeatActivityTaskResponse(
            cancel_requested=result.cancel_requested,
            lease_expires_at=_convert.timestamp(result.lease_expires_at_ms),
        )
        if result.session is not None:
            response.session.CopyFrom(session_message(result.session))
        return response

    async def CompleteActivityTask(
        self, request: service_pb2.CompleteActivityTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.CompleteActivityTaskResponse:
        eager = None
        if request.eager_workflow_task_queue:
            eager = EagerWorkflowTask(
                task_queue=_validate.name(
                    "eager_workflow_task_queue", request.eager_workflow_task_queue
                ),
                lease_ms=self._workflow_task_lease_ms,
            )
        ns = _validate.namespace(request.namespace)
        inline = None
        if request.HasField("inline_workflow_task"):
            spec = request.inline_workflow_task
            _validate_commands(spec.commands)
            run_id = _validate.name("inline_workflow_task.run_id", spec.run_id)
            inline = InlineWorkflowTask(
                run_id=run_id,
                last_seen_event_id=spec.last_seen_event_id,
                commands=list(spec.commands),
                build_id=spec.build_id,
                eager=_eager_activities(
                    spec.max_eager_activities, spec.eager_task_queue, spec.eager_activity_types
                ),
            )
        completion = await self._store.complete_activity_task_inline(
            ns,
            _lease(request.lease),
            _validate.payload_bytes("result", request.result, has=request.HasField("result")),
            eager,
            inline,
        )
        if completion.inline is not None:
            queue = request.inline_workflow_task.eager_task_queue
            return service_pb2.CompleteActivityTaskResponse(
                inline_workflow_task_completed=True,
                appended=_convert.history(completion.inline.appended_events),
                history_length=completion.inline.history_length,
                eager_activities=[
                    self._activity_task(ns, queue, task)
                    for task in completion.inline.eager_activities
                ],
            )
        task = completion.workflow_task
        if task is None:
            return service_pb2.CompleteActivityTaskResponse()
        return service_pb2.CompleteActivityTaskResponse(
            workflow_task=await self._workflow_task(ns, task)
        )

    async def FailActivityTask(
        self, request: service_pb2.FailActivityTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.FailActivityTaskResponse:
        ns = _validate.namespace(request.namespace)
        delay_ms = await self._store.fail_activity_task(
            ns, _lease(request.lease), _failure_bytes(request.failure)
        )
        response = service_pb2.FailActivityTaskResponse()
        if delay_ms is not None:
            response.retry_delay.FromMilliseconds(delay_ms)
            if self._metrics is not None:
                self._metrics.record_activity_retry(ns)
        return response

    async def PollQueryTask(
        self, request: service_pb2.PollQueryTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.PollQueryTaskResponse:
        ns = _validate.namespace(request.namespace)
        queue = _validate.name("task_queue", request.task_queue)
        _validate.name("worker_id", request.worker_id)
        definitions = frozenset((d.name, d.version or "1") for d in request.workflows)

        async def take() -> service_pb2.PollQueryTaskResponse | None:
            return await self._queries.take(ns, queue, definitions, request.worker_id)

        task = await self._long_poll((ns, queue, "query"), take)
        return task or service_pb2.PollQueryTaskResponse()

    async def RespondQueryTask(
        self, request: service_pb2.RespondQueryTaskRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.RespondQueryTaskResponse:
        ns = _validate.namespace(request.namespace)
        _validate.name("query_id", request.query_id)
        answer = request.WhichOneof("answer")
        if answer is None:
            raise InvalidArgumentError("a query answer needs a result or a failure")
        if answer == "result":
            _validate.payload_bytes("result", request.result, has=True)
        # An answer nobody waits for any more (the caller timed out) is dropped.
        await self._queries.answer(ns, request)
        return service_pb2.RespondQueryTaskResponse()

    async def CompleteTasks(
        self, request: service_pb2.CompleteTasksRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.CompleteTasksResponse:
        if len(request.outcomes) > MAX_BATCH_OUTCOMES:
            raise InvalidArgumentError(f"at most {MAX_BATCH_OUTCOMES} outcomes per call")
        if len(request.outcomes) == 1:  # the common case when idle: no task per item
            results = [await self._apply_outcome(request.outcomes[0], context)]
        else:
            # Concurrently, so the store commits them together (one group-commit batch).
            results = await asyncio.gather(
                *(self._apply_outcome(outcome, context) for outcome in request.outcomes)
            )
        return service_pb2.CompleteTasksResponse(results=results)

    async def _apply_outcome(
        self, outcome: service_pb2.TaskOutcome, context: grpc.aio.ServicerContext
    ) -> service_pb2.TaskOutcomeResult:
        """One item of a batch, through the very handler its single call uses."""
        kind = outcome.WhichOneof("outcome")
        try:
            # Not checked with the batch (CHECKED_PER_ITEM): a bad item fails alone.
            check_request(outcome)
            if kind == "complete_workflow_task":
                done = await self.CompleteWorkflowTask(outcome.complete_workflow_task, context)
                return service_pb2.TaskOutcomeResult(complete_workflow_task=done)
            if kind == "fail_workflow_task":
                failed = await self.FailWorkflowTask(outcome.fail_workflow_task, context)
                return service_pb2.TaskOutcomeResult(fail_workflow_task=failed)
            if kind == "complete_activity_task":
                finished = await self.CompleteActivityTask(outcome.complete_activity_task, context)
                return service_pb2.TaskOutcomeResult(complete_activity_task=finished)
            if kind == "fail_activity_task":
                gave_up = await self.FailActivityTask(outcome.fail_activity_task, context)
                return service_pb2.TaskOutcomeResult(fail_activity_task=gave_up)
            raise InvalidArgumentError("an outcome must set one of its four kinds")
        except DurableRpcError as error:
            return service_pb2.TaskOutcomeResult(error=status_message(error))
        except PayloadError as error:
            return service_pb2.TaskOutcomeResult(
                error=status_message(InvalidPayloadError(str(error)))
            )
        except Exception as error:
            unexpected = internal_error(error, "a batched outcome")
            return service_pb2.TaskOutcomeResult(error=status_message(unexpected))
