"""``Worker``: registers definitions, claims tasks, runs them, reports under its lease."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from opentelemetry.metrics import MeterProvider

from durable_rpc import _protocol
from durable_rpc._registration import DuplicateRegistrationError, source_of
from durable_rpc.activity._definition import ActivityDefinition, must_define
from durable_rpc.activity._failure import failure_from_exception
from durable_rpc.errors import (
    DurableRpcError,
    InvalidArgumentError,
    LeaseLostError,
    PayloadCodecError,
    StoreUnavailableError,
)
from durable_rpc.sessions import SessionOptions
from durable_rpc.telemetry import (
    EngineMetrics,
    activity_span,
    current_trace_context,
    workflow_task_span,
)
from durable_rpc.v1 import payload_pb2, service_pb2, workflow_task_pb2
from durable_rpc.worker._activity_task import AttemptOutcome, run_attempt
from durable_rpc.worker._client import WorkerClient, call
from durable_rpc.worker._codec_failure import fail_undecodable
from durable_rpc.worker._counters import WorkerCounters
from durable_rpc.worker._inline import (
    StickyHistories,
    StickyRun,
    closes_run,
    sticky_run,
    task_history_bytes,
    with_activity_result,
)
from durable_rpc.worker._lease_keeper import LeaseKeeper
from durable_rpc.worker._live_runs import LiveRun, LiveRuns
from durable_rpc.worker._outcomes import OutcomeSender
from durable_rpc.worker._report_retry import DEFAULT_SHUTDOWN_GRACE_S, ReportBackoff
from durable_rpc.worker._server_info import checked_server_info
from durable_rpc.worker._server_link import ServerLink, is_transient
from durable_rpc.worker._sessions import WorkerSessionHandle, worker_sessions_of
from durable_rpc.worker._sticky_cache import (
    DEFAULT_STICKY_CACHE,
    StickyCacheMetrics,
    StickyCacheOptions,
)
from durable_rpc.worker._task_history import HistoryWarnings, fetch_rest_of_history
from durable_rpc.worker._task_logs import log_failed_attempt, log_failed_workflow_task
from durable_rpc.worker._workflow_task import (
    Decision,
    TaskDecision,
    answer_query,
    decide_inline,
    decide_task,
    last_event_id,
)
from durable_rpc.workflow._definition import WorkflowDefinition, definition_of
from durable_rpc.workflow._values import DEFAULT_HISTORY_WARN

if TYPE_CHECKING:
    from durable_rpc.worker._supervisor import CancellationToken, SupervisorReport

log = logging.getLogger("durable_rpc.worker")

TaskOutcome = Literal["completed", "failed", "lease_lost"]
TaskKind = Literal["workflow", "activity", "query"]
_T = TypeVar("_T")

_DEFAULT_WORKER_HEARTBEAT_S = 10.0

# Longest kept history decided inline when the run's live instance is kept too. An inline
# decision replays from event 1 (~3 us an event: 1.5 ms at 500) to save one round trip
# and commit (~2 ms); a kept instance decides the ordinary task in ~0.1 ms.
INLINE_MAX_EVENTS = 500
#: A run's live instance is kept only once its history has this many events: below, a
#: cold replay costs ~3 us an event (~0.3 ms here, bench/replay_bench.py) while a kept
#: instance holds ~15 KB until the run's next task -- the hello benchmark's 500 runs in
#: flight raised the worker's peak RSS by 1.8 MiB for instances never used (their next
#: decisions are inline ones, which replay the kept history).
LIVE_MIN_EVENTS = 100


@functools.cache
def default_worker_id() -> str:
    """``host:pid:random`` -- unique per process, stable for the process's lifetime."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class OutcomeSink(Protocol):
    """Counts the outcomes of work a worker starts by itself (eager dispatch)."""

    def count_eager(self, kind: TaskKind, outcome: TaskOutcome) -> None: ...

    def count_inline(self) -> None: ...


class DefinitionUnavailableError(Exception):
    """A workflow task names a (type, version) this worker did not register."""


class Worker:
    """Runs registered workflows and activities from one task queue.

    Host it with :class:`~durable_rpc.worker.WorkflowSupervisor` for bounded concurrency
    and graceful shutdown, or ``async with Worker(...)`` for a default supervisor in the
    background.
    """

    def __init__(
        self,
        client: WorkerClient,
        *,
        task_queue: str,
        workflows: Iterable[type] = (),
        activities: Iterable[Callable[..., Any]] = (),
        worker_id: str | None = None,
        build_id: str = "",
        max_concurrent_activities: int = 100,
        allow_definition_change: bool = False,
        workflow_task_deadline: timedelta = timedelta(seconds=10),
        activity_executor: Executor | None = None,
        sticky_cache: StickyCacheOptions = DEFAULT_STICKY_CACHE,
        shutdown_report_grace: timedelta = timedelta(seconds=DEFAULT_SHUTDOWN_GRACE_S),
        meter_provider: MeterProvider | None = None,
        worker_sessions: bool = False,
        capabilities: Mapping[str, str] | Sequence[str] | None = None,
        max_concurrent_worker_sessions: int = 4,
    ) -> None:
        if not task_queue:
            raise ValueError("task_queue must not be empty")
        if max_concurrent_activities < 1:
            raise ValueError("max_concurrent_activities must be at least 1")
        self.client = client
        self.task_queue = task_queue
        self.worker_id = worker_id or default_worker_id()
        self.build_id = build_id
        self.allow_definition_change = allow_definition_change
        self.workflow_task_deadline = workflow_task_deadline
        # How long a report the server cannot take keeps trying once shutdown began
        # (see _report_retry.py); before that it tries until the server answers.
        self.shutdown_report_grace = shutdown_report_grace
        # Kept as given so validate_registration() judges the configuration, not an index
        # that already dropped a duplicate.
        self._workflow_classes = tuple(workflows)
        self._activity_functions = tuple(activities)
        self._workflows = _index_workflows(self._workflow_classes)
        self._activities = _index_activities(self._activity_functions)
        if not self._workflows and not self._activities:
            raise ValueError("a worker needs at least one workflow or activity")
        self._activity_slots = asyncio.Semaphore(max_concurrent_activities)
        # What this process counted, sent with each worker heartbeat (ListWorkers).
        self.counters = WorkerCounters(max_concurrent_activities if self._activities else 0)
        self._owns_activity_executor = activity_executor is None
        self._activity_executor = activity_executor or ThreadPoolExecutor(
            max_workers=max_concurrent_activities, thread_name_prefix="durable-activity"
        )
        # Workflow tasks run in their own pool: a workflow stuck in blocking code keeps
        # its thread (Python threads cannot be killed) but never blocks activities or
        # the event loop; its task fails at the deadline.
        self._workflow_executor = ThreadPoolExecutor(thread_name_prefix="durable-workflow")
        # Every call reports to it; it logs the server's loss and return, once each.
        self.link = ServerLink(self.worker_id)
        # Worker sessions (durable_rpc.sessions): this worker takes the activities of
        # sessions it may hold, with these capabilities; None: it never gets them.
        self._sessions = (
            worker_sessions_of(
                client,
                self.link,
                task_queue=task_queue,
                worker_id=self.worker_id,
                capabilities=capabilities,
                max_sessions=max_concurrent_worker_sessions,
            )
            if worker_sessions
            else None
        )
        if not worker_sessions and capabilities:
            raise ValueError("capabilities are for worker sessions: pass worker_sessions=True")
        self._keeper = LeaseKeeper(client, self.link)
        if not isinstance(sticky_cache, StickyCacheOptions):
            raise TypeError("sticky_cache must be a StickyCacheOptions")
        self.sticky_cache = sticky_cache
        # Histories of recently decided runs, for inline workflow tasks, and their live
        # workflow instances, so their next task applies only new events; each within
        # the sticky cache bounds (max_entries=0: nothing kept).
        self._sticky = StickyHistories(sticky_cache) if sticky_cache.enabled else None
        self._live = LiveRuns(sticky_cache) if sticky_cache.enabled else None
        # Recorded on ``meter_provider``, else on the global provider (a no-op until an SDK
        # one is installed; docs/operations.md, "Metrics").
        self.metrics = EngineMetrics(meter_provider)
        if self._live is not None:
            self.metrics.observe_sticky_cache(self.namespace, task_queue, self._live.snapshot)
        # The server's history warn marks (events, bytes), from its latest workflow task.
        self._history_warn = DEFAULT_HISTORY_WARN
        self._history_warned = HistoryWarnings()
        self._outcomes = OutcomeSender(client, self.link)
        self._background: list[asyncio.Task[None]] = []
        self._registered = False
        # What the server said at registration: its info (GetServerInfo), and which of
        # this worker's protocol capabilities it supports too. (Not ``capabilities``: that
        # argument names the resources this worker offers to worker sessions.)
        self.server_info: service_pb2.GetServerInfoResponse | None = None
        self.negotiated_capabilities: tuple[str, ...] = ()
        self._poll_ids = itertools.count(1)
        self._heartbeat_interval = _DEFAULT_WORKER_HEARTBEAT_S
        self._supervisor_token: CancellationToken | None = None
        self._supervisor_task: asyncio.Task[SupervisorReport] | None = None
        # Activities handed out eagerly with a workflow-task completion run as tasks of
        # their own (each holding an activity slot); `drain()` waits for them.
        self._eager_runs: set[asyncio.Task[None]] = set()
        # Set while no eager activity is between its hand-over and its report.
        self._eager_settled = asyncio.Event()
        # Activity attempts running or reporting, by task id: settled with the outcome the
        # server did not take (LEASE_LOST), else None. A claim of the same task under a
        # newer token -- its retry, handed to this very worker by a poll answered while
        # the worker was paused or cut off -- reports that outcome instead of running the
        # activity a second time.
        self._unsettled: dict[int, asyncio.Future[AttemptOutcome | None]] = {}
        self._eager_settled.set()
        # Where outcomes of eager work are counted (set by the supervisor).
        self.outcomes: OutcomeSink | None = None
        # Eager dispatch is a claim: once shutdown begins, completions stop asking for it.
        self.claiming = True
        # The report of the background supervisor, once ``async with`` exited.
        self.report: SupervisorReport | None = None

    # --- identity -------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return self.client.namespace

    @property
    def workflow_definitions(self) -> Sequence[WorkflowDefinition]:
        return list(self._workflows.values())

    @property
    def activity_names(self) -> Sequence[str]:
        return sorted(self._activities)

    @property
    def task_kinds(self) -> Sequence[TaskKind]:
        kinds: list[TaskKind] = []
        if self._workflows:
            kinds.append("workflow")
        if self._activities:
            kinds.append("activity")
        return kinds

    @property
    def lease_losses(self) -> int:
        return self._keeper.lost

    @property
    def live_runs(self) -> LiveRuns | None:
        """The live workflow instances kept for the runs' next tasks (None when
        ``sticky_cache.max_entries`` is 0)."""
        return self._live

    def sticky_cache_metrics(self) -> StickyCacheMetrics:
        """What the live-instance cache did since the worker started (hits, misses,
        evictions, forced cold replays) and what it keeps now (entries, their encoded
        history bytes); all zero when the cache is disabled. Call it on the worker's
        event loop."""
        if self._live is None:
            return StickyCacheMetrics(0, 0, 0, 0, 0, 0)
        return self._live.metrics()

    # --- lifecycle ------------------------------------------------------------------

    def validate_registration(self) -> None:
        """Check the registration rules locally, with no server: raises
        :class:`~durable_rpc.DuplicateRegistrationError` (kind, name, workflow scope, both
        source locations) for a workflow ``(name, version)`` or an activity name given
        twice. Construction runs the same check, so a Worker with a duplicate never reaches
        the server; query, update and signal names are checked per workflow type when
        ``@workflow.defn`` builds the class."""
        _index_workflows(self._workflow_classes)
        _index_activities(self._activity_functions)

    async def register(self) -> None:
        """Register definitions (refused with DefinitionChangedError when a fingerprint
        changed under an existing (name, version)). Asks the server's info first and
        raises ProtocolVersionUnsupportedError when the server cannot serve this worker."""
        self.server_info = await checked_server_info(self.client, self.link)
        request = service_pb2.RegisterWorkerRequest(
            namespace=self.namespace,
            worker_id=self.worker_id,
            task_queue=self.task_queue,
            workflows=[
                service_pb2.WorkflowDefinition(
                    name=d.name,
                    version=d.version,
                    fingerprint=d.fingerprint,
                    signals=sorted(d.declared_signals or ()),
                    signals_declared=d.declared_signals is not None,
                    fingerprint_algorithm=d.fingerprint_algorithm,
                    legacy_fingerprints=[
                        service_pb2.Fingerprint(algorithm=algorithm, value=value)
                        for algorithm, value in sorted(d.legacy_fingerprints.items())
                    ],
                )
                for d in self._workflows.values()
            ],
            activities=self.activity_names,
            build_id=self.build_id,
            allow_definition_change=self.allow_definition_change,
            protocol_version=_protocol.PROTOCOL_VERSION,
            capabilities=_protocol.WORKER_CAPABILITIES,
        )
        response = await call(self.client.worker_service.RegisterWorker, request, self.link)
        if self._sessions is not None:
            await self._sessions.register()
        self.negotiated_capabilities = tuple(response.capabilities)
        interval = response.heartbeat_interval.ToTimedelta().total_seconds()
        self._heartbeat_interval = interval if interval > 0 else _DEFAULT_WORKER_HEARTBEAT_S
        self._registered = True

    async def start(self) -> None:
        """Register (once) and start the worker heartbeat and the lease keeper."""
        if not self._registered:
            await self.register()
        if not self._background:
            self._background = [
                asyncio.ensure_future(self._heartbeat_loop()),
                asyncio.ensure_future(self._keeper.run()),
            ]

    async def drain(self) -> None:
        """Wait for eagerly dispatched activities to finish their lease protocol."""
        while self._eager_runs:
            await asyncio.gather(*list(self._eager_runs), return_exceptions=True)

    async def stop(self) -> None:
        """Stop background work and deregister. Call after in-flight tasks drained."""
        if self._supervisor_token is not None:
            # Stopped while the supervisor of ``async with`` runs: its cycles must not go
            # on claiming tasks for a worker that is gone.
            self._supervisor_token.cancel()
        for task in self._background:
            task.cancel()
        for task in self._background:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._background = []
        if self._sessions is not None and self._registered:
            # Its activities drained: the sessions it holds close before it goes.
            await self._sessions.close_all()
        if self._registered:
            request = service_pb2.DeregisterWorkerRequest(
                namespace=self.namespace, worker_id=self.worker_id
            )
            try:
                await call(self.client.worker_service.DeregisterWorker, request, self.link)
            except DurableRpcError as error:
                log.warning("deregistering worker %s failed: %s", self.worker_id, error)
            self._registered = False
        # Nothing kept outlives the worker (the next one replays cold).
        if self._live is not None:
            self._live.clear()
        if self._sticky is not None:
            self._sticky.clear()
        self._workflow_executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_activity_executor:
            self._activity_executor.shutdown(wait=False, cancel_futures=True)

    async def heartbeat(self) -> None:
        """One worker heartbeat now, with the counters so far (the loop sends one every
        interval the server asked for)."""
        request = service_pb2.WorkerHeartbeatRequest(
            namespace=self.namespace, worker_id=self.worker_id, counters=self.counters.message()
        )
        await call(self.client.worker_service.WorkerHeartbeat, request, self.link)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self._heartbeat_interval)
            try:
                await self.heartbeat()
            except DurableRpcError as error:
                if not is_transient(error):  # an outage is logged once, by the link
                    log.warning("worker heartbeat failed: %s", error)

    async def __aenter__(self) -> Worker:
        from durable_rpc.worker._supervisor import (
            CancellationToken,
            WorkflowSupervisor,
            WorkflowSupervisorConfig,
        )

        await self.register()
        token = CancellationToken()
        supervisor = WorkflowSupervisor(self, WorkflowSupervisorConfig.default())
        self._supervisor_token = token
        self._supervisor_task = asyncio.ensure_future(supervisor.run(token))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._supervisor_task is None or self._supervisor_token is None:
            return
        self._supervisor_token.cancel()
        self.report = await self._supervisor_task
        self._supervisor_task = None

    def worker_session(self, options: SessionOptions) -> WorkerSessionHandle:
        """An explicit session this worker will hold (``options.session_id`` set):
        ``create()``, ``renew()``, ``close(reason)``. Needs ``worker_sessions=True``."""
        if self._sessions is None:
            raise RuntimeError("worker sessions are off: pass worker_sessions=True")
        return WorkerSessionHandle(self._sessions, options)

    # --- claiming -------------------------------------------------------------------

    def new_poll_id(self) -> str:
        """A request id for one poll, kept by its retries (unique in this worker)."""
        return str(next(self._poll_ids))

    async def poll_workflow_task(
        self, request_id: str = ""
    ) -> service_pb2.PollWorkflowTaskResponse | None:
        """Long-poll for a workflow task; None when the poll ended empty. A retry of a
        poll that failed passes its ``request_id`` again: the server then hands back the
        task a lost response had claimed (docs/engine.md, "Idempotent polls")."""
        request = service_pb2.PollWorkflowTaskRequest(
            namespace=self.namespace,
            task_queue=self.task_queue,
            worker_id=self.worker_id,
            request_id=request_id,
        )
        try:
            response = await call(self.client.worker_service.PollWorkflowTask, request, self.link)
        except PayloadCodecError as error:
            await fail_undecodable(self.client, self.worker_id, self.link, error)
            return None
        return response if response.task_id else None

    async def poll_activity_task(
        self, request_id: str = ""
    ) -> service_pb2.PollActivityTaskResponse | None:
        """Long-poll for an activity attempt; None when the poll ended empty
        (``request_id`` as for :meth:`poll_workflow_task`)."""
        request = service_pb2.PollActivityTaskRequest(
            namespace=self.namespace,
            task_queue=self.task_queue,
            worker_id=self.worker_id,
            activity_types=self.activity_names,
            request_id=request_id,
        )
        try:
            response = await call(self.client.worker_service.PollActivityTask, request, self.link)
        except PayloadCodecError as error:
            await fail_undecodable(self.client, self.worker_id, self.link, error)
            return None
        return response if response.task_id else None

    async def poll_query_task(self) -> service_pb2.PollQueryTaskResponse | None:
        """Long-poll for a query on this queue's runs of the registered workflows."""
        request = service_pb2.PollQueryTaskRequest(
            namespace=self.namespace,
            task_queue=self.task_queue,
            worker_id=self.worker_id,
            workflows=[
                service_pb2.WorkflowDefinition(name=d.name, version=d.version)
                for d in self._workflows.values()
            ],
        )
        try:
            response = await call(self.client.worker_service.PollQueryTask, request, self.link)
        except PayloadCodecError as error:
            await fail_undecodable(self.client, self.worker_id, self.link, error)
            return None
        return response if response.query_id else None

    def activity_capacity(self) -> asyncio.Semaphore:
        """Held around poll *and* run: an attempt is only claimed when it can start."""
        return self._activity_slots

    def _lease(self, task_id: int, fencing_token: int) -> service_pb2.Lease:
        return service_pb2.Lease(
            task_id=task_id, worker_id=self.worker_id, fencing_token=fencing_token
        )

    # --- workflow tasks -------------------------------------------------------------

    async def execute_workflow_task(
        self, task: service_pb2.PollWorkflowTaskResponse
    ) -> TaskOutcome:
        """Replay, decide, and complete (or fail) the workflow task, in one span that is a
        child of the run's start (replay itself never emits spans)."""
        started = task.history.events[0].workflow_started if task.history.events else None
        with workflow_task_span(
            task.workflow_type,
            task.workflow_id,
            task.run_id,
            task.attempt,
            dict(started.trace_context) if started is not None else None,
        ):
            began = time.perf_counter()
            outcome = await self.counters.counted(self._execute_workflow_task(task))
            self.metrics.record_execution(
                self.namespace, self.task_queue, "workflow", outcome, time.perf_counter() - began
            )
            return outcome

    async def _execute_workflow_task(
        self, task: service_pb2.PollWorkflowTaskResponse
    ) -> TaskOutcome:
        lease = self._lease(task.task_id, task.fencing_token)
        # This task supersedes any kept history; kept again once the server answers.
        kept = self._sticky.take(task.run_id) if self._sticky is not None else None
        if task.history_warn_events and task.history_warn_bytes:
            self._history_warn = (task.history_warn_events, task.history_warn_bytes)
        self._history_warned.check(task, self._history_warn)
        try:
            await fetch_rest_of_history(self.client.worker_service, self.namespace, task, self.link)
        except PayloadCodecError as error:
            error.response = task  # the claimed task, failed under its lease
            await fail_undecodable(self.client, self.worker_id, self.link, error)
            return "failed"
        except DurableRpcError as error:
            # The task is not failed for it (the run is fine): its lease runs out and the
            # task is claimed again.
            if not is_transient(error):  # an outage is logged once, by the link
                log.warning("history of workflow task %s not fetched: %s", task.task_id, error)
            return "failed"
        # Taken out for this task; kept again only once the server accepted its decision.
        live = self._live.take(task.run_id) if self._live is not None else None
        try:
            decided = await self._decide(task, live)
        except Exception as error:
            # Never the workflow: the run stays open, the task is retried and the failure
            # is shown by describe (NondeterminismError, deadline, missing definition...).
            fail = service_pb2.FailWorkflowTaskRequest(
                namespace=self.namespace, lease=lease, failure=failure_from_exception(error)
            )
            # One line per failed attempt, with the backoff the server answers.
            logged = functools.partial(log_failed_workflow_task, task, error)
            return await self._report("fail_workflow_task", fail, "failed", logged)
        if decided.diverged is not None:
            log.debug("workflow task %s replayed cold: %s", task.task_id, decided.diverged)
        decision = decided.decision
        commands = decision.commands
        _carry_trace_context(commands)
        slots = await self._reserve_activity_slots(commands)
        complete = service_pb2.CompleteWorkflowTaskRequest(
            namespace=self.namespace,
            lease=lease,
            last_seen_event_id=last_event_id(task.history),
            commands=commands,
            build_id=self.build_id,
            max_eager_activities=slots,
            eager_activity_types=self.activity_names if slots else (),
            eager_task_queue=self.task_queue if slots else "",
            rejected_updates=[
                service_pb2.RejectedUpdate(update_id=update_id, failure=failure)
                for update_id, failure in decision.rejected_updates
            ],
            return_appended_events=self._sticky is not None,
        )
        eager: list[service_pb2.PollActivityTaskResponse] = []

        def completed(response: service_pb2.CompleteWorkflowTaskResponse) -> None:
            eager.extend(response.eager_activities)
            if self._live is not None and not closes_run(commands):
                self._keep_live(task.run_id, decided.run, commands)
            if self._sticky is not None:
                self._sticky.extend(
                    sticky_run(task, task_history_bytes(task, kept)),
                    task.run_id,
                    list(commands),
                    response.appended,
                    response.history_length,
                )

        try:
            outcome = await self._report("complete_workflow_task", complete, "completed", completed)
        finally:
            for _ in range(slots - len(eager)):
                self._activity_slots.release()
        for activity in eager:
            self._start_eager_activity(activity)
        return outcome

    async def _reserve_activity_slots(self, commands: Sequence[Any]) -> int:
        """Take free activity slots (without waiting) for the activities these commands
        schedule that this worker can run, so the server may hand them over eagerly."""
        if not self._activities or not self.claiming:
            return 0
        wanted = sum(
            1
            for c in commands
            if c.WhichOneof("kind") == "schedule_activity"
            and c.schedule_activity.activity_type in self._activities
            and c.schedule_activity.task_queue in ("", self.task_queue)
        )
        taken = 0
        while taken < wanted and not self._activity_slots.locked():
            # Not locked: acquire() takes a free slot at once, without waiting.
            await self._activity_slots.acquire()
            taken += 1
        return taken

    async def eager_settled(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) until the activities handed over eagerly have
        reported: a cycle about to poll again lets that work go first, since a poll is
        never urgent while other polls of this worker wait and the handed-over work is."""
        if not self._eager_settled.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._eager_settled.wait(), timeout)

    def _start_eager_activity(self, task: service_pb2.PollActivityTaskResponse) -> None:
        self._eager_settled.clear()

        async def run() -> None:
            try:
                outcome = await self.execute_activity_task(task)
                if self.outcomes is not None:
                    self.outcomes.count_eager("activity", outcome)
            except Exception:
                log.exception("eager activity task %s failed to run", task.task_id)
            finally:
                self._activity_slots.release()
                if not any(not t.done() for t in self._eager_runs if t is not run_task):
                    self._eager_settled.set()

        run_task = asyncio.ensure_future(run())
        self._eager_runs.add(run_task)
        run_task.add_done_callback(self._eager_runs.discard)

    def _definition(self, workflow_type: str, version: str) -> WorkflowDefinition:
        definition = self._workflows.get((workflow_type, version or "1"))
        if definition is None:
            raise DefinitionUnavailableError(
                f"worker {self.worker_id} has no workflow {workflow_type!r} "
                f"version {version or '1'!r}"
            )
        return definition

    async def _decide(
        self, task: service_pb2.PollWorkflowTaskResponse, live: LiveRun | None
    ) -> TaskDecision:
        """Decide ``task`` from ``live`` (its run's kept instance) or from event 1."""
        definition = self._definition(task.workflow_type, task.workflow_version)
        seconds = self.workflow_task_deadline.total_seconds()
        run = functools.partial(
            decide_task,
            definition,
            task,
            live,
            task_queue=self.task_queue,
            deadline=time.monotonic() + seconds,
            history_warn=self._history_warn,
        )
        decided = await self._run_workflow_code(run, "workflow task")
        events = len(task.history.events)
        if self._live is not None:
            result = self._live.count(found=live is not None, continued=decided.continued)
            self.metrics.record_sticky_cache(self.namespace, self.task_queue, result)
        # A continued instance applied only the events after those it knew.
        replayed = events - live.known if decided.continued and live is not None else events
        self.metrics.record_replayed_events(self.namespace, self.task_queue, replayed)
        return decided

    def _keep_live(
        self, run_id: str, run: LiveRun, commands: Sequence[workflow_task_pb2.Command]
    ) -> None:
        """Keep ``run``'s instance for the run's next task: the server recorded
        ``commands`` (what the next history must show after the events it knows)."""
        if self._live is not None and run.known >= LIVE_MIN_EVENTS:
            run.sent = workflow_task_pb2.ActivationCompletion(commands=commands).SerializeToString()
            self._live.keep(run_id, run)

    async def _run_workflow_code(self, fn: Callable[[], _T], what: str) -> _T:
        """Run ``fn`` on the workflow pool under ``workflow_task_deadline``.

        Workflow code that blocks (time.sleep, I/O, a lock) cannot be interrupted: at
        the deadline the task fails with a TimeoutError whose message and stack trace
        show where the workflow thread is stuck (its thread keeps running until the
        call returns; the worker itself never hangs).
        """
        seconds = self.workflow_task_deadline.total_seconds()
        loop = asyncio.get_running_loop()
        thread: list[int] = []

        def run() -> _T:
            thread.append(threading.get_ident())
            return fn()

        future = loop.run_in_executor(self._workflow_executor, run)
        timed_out = False

        def expire() -> None:
            nonlocal timed_out
            if not future.done():
                timed_out = True
                future.cancel()  # the thread runs on; its late result is dropped

        # A plain timer rather than asyncio.wait_for: no extra task on this hot path.
        deadline = loop.call_later(seconds, expire)
        try:
            return await future
        except asyncio.CancelledError:
            if timed_out:
                raise _blocked_error(what, seconds, thread[0] if thread else None) from None
            raise
        finally:
            deadline.cancel()

    # --- query tasks ----------------------------------------------------------------

    async def execute_query_task(self, task: service_pb2.PollQueryTaskResponse) -> TaskOutcome:
        """Answer a query by replaying the run with this code; never touches the run."""
        request = service_pb2.RespondQueryTaskRequest(
            namespace=self.namespace, query_id=task.query_id, worker_id=self.worker_id
        )
        outcome: TaskOutcome = "completed"
        try:
            definition = self._definition(task.workflow_type, task.workflow_version)
            seconds = self.workflow_task_deadline.total_seconds()
            answer = functools.partial(
                answer_query,
                definition,
                task.history.SerializeToString(),
                task.workflow_time.ToMilliseconds(),
                task.query_name,
                task.input.data if task.HasField("input") else b"",
                task_queue=self.task_queue,
                deadline=time.monotonic() + seconds,
            )
            result = await self._run_workflow_code(answer, f"query {task.query_name!r}")
            request.result.data = result
        except Exception as error:
            log.info("query %r of %s failed: %s", task.query_name, task.workflow_id, error)
            request.failure.CopyFrom(failure_from_exception(error))
            outcome = "failed"
        await call(self.client.worker_service.RespondQueryTask, request, self.link)
        return outcome

    # --- activity tasks -------------------------------------------------------------

    async def execute_activity_task(
        self, task: service_pb2.PollActivityTaskResponse
    ) -> TaskOutcome:
        """Run one activity attempt and report its outcome under its lease, in a span."""
        with activity_span(
            task.activity_type,
            task.workflow_id,
            task.run_id,
            task.attempt,
            dict(task.trace_context) or None,
        ):
            began = time.perf_counter()
            outcome = await self.counters.counted(self._execute_activity_task(task))
            self.metrics.record_execution(
                self.namespace, self.task_queue, "activity", outcome, time.perf_counter() - began
            )
            return outcome

    async def _execute_activity_task(
        self, task: service_pb2.PollActivityTaskResponse
    ) -> TaskOutcome:
        lease = self._lease(task.task_id, task.fencing_token)
        if self._sessions is not None and task.HasField("session"):
            self._sessions.note(task.session)
        earlier = self._unsettled.get(task.task_id)
        if earlier is not None and self._keeper.lose_older(task.task_id, task.fencing_token):
            # The earlier attempt is still running: the server gave up on it (e.g. its
            # heartbeat timeout passed) and this claim proves its lease lost, so it is
            # stopped and this attempt runs afresh.
            log.info("activity task %s claimed again while running: restarted", task.task_id)
        elif earlier is not None:
            # Finished, its report pending. Shielded: this claim giving up must not cancel
            # the earlier attempt's report.
            held = await asyncio.shield(earlier)
            if held is not None:
                log.info(
                    "activity task %s claimed again (token %s) while this worker held its "
                    "outcome: reporting that outcome, not running it again",
                    task.task_id,
                    task.fencing_token,
                )
                return await self._report_attempt(task, lease, held)
        settled: asyncio.Future[AttemptOutcome | None] = asyncio.get_running_loop().create_future()
        self._unsettled[task.task_id] = settled
        untaken: AttemptOutcome | None = None
        try:
            outcome = await self._run_activity(task, lease)
            reported = await self._report_attempt(task, lease, outcome)
            if reported == "lease_lost" and outcome.kind != "lease_lost":
                untaken = outcome
            return reported
        finally:
            if self._unsettled.get(task.task_id) is settled:
                del self._unsettled[task.task_id]
            settled.set_result(untaken)

    async def _run_activity(
        self, task: service_pb2.PollActivityTaskResponse, lease: service_pb2.Lease
    ) -> AttemptOutcome:
        definition = self._activities.get(task.activity_type)
        if definition is None:
            failure = payload_pb2.Failure(
                type="ActivityNotRegistered",
                message=f"worker {self.worker_id} has no activity {task.activity_type!r}",
            )
            return AttemptOutcome("failed", failure=failure)
        return await run_attempt(
            definition,
            task,
            lease,
            task_queue=self.task_queue,
            keeper=self._keeper,
            executor=self._activity_executor,
            sessions=self._sessions,
        )

    async def _report_attempt(
        self,
        task: service_pb2.PollActivityTaskResponse,
        lease: service_pb2.Lease,
        outcome: AttemptOutcome,
    ) -> TaskOutcome:
        if outcome.kind == "lease_lost":
            log.info("activity task %s lost its lease; its outcome is dropped", task.task_id)
            return "lease_lost"
        if outcome.kind == "completed":
            return await self._complete_activity(task, lease, outcome.result)
        fail = service_pb2.FailActivityTaskRequest(
            namespace=self.namespace, lease=lease, failure=outcome.failure
        )
        failure = outcome.failure or payload_pb2.Failure()
        # One line per failed attempt, with the retry the server answers.
        logged = functools.partial(log_failed_attempt, task, failure)
        return await self._report("fail_activity_task", fail, "failed", logged)

    async def _complete_activity(
        self, task: service_pb2.PollActivityTaskResponse, lease: service_pb2.Lease, result: bytes
    ) -> TaskOutcome:
        """Report a result; with it, the run's next workflow task decided inline (see
        ``_inline.py``) or, failing that, that task claimed eagerly when it is ours."""
        complete = service_pb2.CompleteActivityTaskRequest(
            namespace=self.namespace,
            lease=lease,
            result=payload_pb2.Payload(data=result),
            eager_workflow_task_queue=(
                self.task_queue if self._workflows and self.claiming else ""
            ),
        )
        sticky = self._sticky.get(task.run_id) if self._sticky is not None else None
        inline = None
        last_seen = 0
        if sticky is not None and self._warm_is_cheaper(task.run_id, sticky):
            # Kept for the ordinary task, which extends its bytes (see task_history_bytes).
            sticky = None
        if sticky is not None and self.claiming:
            last_seen = sticky.history_length
            inline = await self._decide_inline(sticky, task, result)
        slots = 0
        if inline is not None:
            slots = await self._reserve_activity_slots(inline.commands)
            complete.inline_workflow_task.CopyFrom(
                service_pb2.InlineWorkflowTask(
                    run_id=task.run_id,
                    last_seen_event_id=last_seen,
                    commands=inline.commands,
                    build_id=self.build_id,
                    max_eager_activities=slots,
                    eager_activity_types=self.activity_names if slots else (),
                    eager_task_queue=self.task_queue if slots else "",
                )
            )
        next_task: list[service_pb2.PollWorkflowTaskResponse] = []
        eager: list[service_pb2.PollActivityTaskResponse] = []
        decided_inline = False

        def completed(response: service_pb2.CompleteActivityTaskResponse) -> None:
            nonlocal decided_inline
            if response.workflow_task.task_id:
                next_task.append(response.workflow_task)
            if response.inline_workflow_task_completed and inline is not None:
                decided_inline = True
                eager.extend(response.eager_activities)
                if self._live is not None and closes_run(inline.commands):
                    # The run closed: its kept instance has no next task to decide.
                    self._live.forget(task.run_id)
                if sticky is not None and self._sticky is not None:
                    self._sticky.extend(
                        sticky,
                        task.run_id,
                        list(inline.commands),
                        response.appended,
                        response.history_length,
                    )

        try:
            try:
                reported = await self._report(
                    "complete_activity_task", complete, "completed", completed
                )
            except InvalidArgumentError:
                if inline is None:
                    raise
                # The server refused the decision (a bug on either side): never let that
                # cost the result. Report it alone; the ordinary workflow task follows.
                log.warning("inline workflow task of %s refused; reporting alone", task.run_id)
                complete.ClearField("inline_workflow_task")
                inline = None
                reported = await self._report(
                    "complete_activity_task", complete, "completed", completed
                )
        finally:
            for _ in range(slots - len(eager)):
                self._activity_slots.release()
            if sticky is not None and not decided_inline and self._sticky is not None:
                self._sticky.forget(task.run_id)  # the ordinary workflow task follows
        if decided_inline:
            self.counters.decided_inline()
        if decided_inline and self.outcomes is not None:
            self.outcomes.count_inline()
        for activity in eager:
            self._start_eager_activity(activity)
        for workflow_task in next_task:
            decided = await self.execute_workflow_task(workflow_task)
            if self.outcomes is not None:
                self.outcomes.count_eager("workflow", decided)
        return reported

    def _warm_is_cheaper(self, run_id: str, sticky: StickyRun) -> bool:
        """Whether the run's next task is better decided as an ordinary task on its kept
        live instance (O(new events)) than inline (a replay from event 1 on a fresh
        instance): past ``INLINE_MAX_EVENTS`` the replay costs more than the round trip
        and commit inline decisions save."""
        return (
            sticky.history_length > INLINE_MAX_EVENTS
            and self._live is not None
            and (run_id in self._live)
        )

    async def _decide_inline(
        self, run: StickyRun, task: service_pb2.PollActivityTaskResponse, result: bytes
    ) -> Decision | None:
        """The run's next workflow task decided from its kept history plus this result,
        or None when it cannot be decided inline (see ``decide_inline``)."""
        definition = self._workflows.get((run.workflow_type, run.workflow_version or "1"))
        if definition is None:
            return None
        history = with_activity_result(run, task, self.worker_id, result)
        seconds = self.workflow_task_deadline.total_seconds()
        decide = functools.partial(
            decide_inline,
            definition,
            history,
            task_queue=self.task_queue,
            deadline=time.monotonic() + seconds,
            history_warn=self._history_warn,
        )
        with workflow_task_span(
            run.workflow_type, run.workflow_id, task.run_id, 1, run.trace_context or None
        ):
            try:
                decision = await self._run_workflow_code(decide, "inline workflow task")
            except TimeoutError:
                return None
            if decision is not None:
                _carry_trace_context(decision.commands)
                # Decided from event 1: the kept history and the new result.
                self.metrics.record_replayed_events(
                    self.namespace, self.task_queue, run.history_length + 1
                )
            return decision

    # --- reporting ------------------------------------------------------------------

    async def _report(
        self,
        kind: str,
        request: Any,
        outcome: TaskOutcome,
        on_response: Callable[[Any], object] | None = None,
    ) -> TaskOutcome:
        """Send a completion; LEASE_LOST means another owner took over: drop silently.
        ``kind`` names the TaskOutcome field (``complete_workflow_task``, ...).

        A transient failure (StoreUnavailableError: UNAVAILABLE, DEADLINE_EXCEEDED, no
        connection) is retried until the server answers for good: the report stays
        acceptable after the lease expired until someone else claims the task, and
        completing twice with the same lease is idempotent (see _report_retry.py)."""
        backoff = ReportBackoff(
            lambda: not self.claiming, self.shutdown_report_grace.total_seconds()
        )
        task_id = request.lease.task_id
        while True:
            try:
                response = await self._outcomes.send(kind, request)
            except LeaseLostError:
                self._keeper.lost += 1
                log.info("task %s: lease lost before reporting; dropped", task_id)
                return "lease_lost"
            except StoreUnavailableError as error:
                pause = backoff.pause()
                if pause is None:
                    log.warning(
                        "task %s: report abandoned on shutdown after %d tries (%s); the "
                        "server will treat the attempt as lost when its lease expires",
                        task_id,
                        backoff.failures,
                        error,
                    )
                    raise
                # Not logged: the link logs the outage once; the retry is routine.
                await asyncio.sleep(pause)
                continue
            if backoff.failures:
                log.debug("task %s: report landed after %d retries", task_id, backoff.failures)
            if on_response is not None:
                on_response(response)
            return outcome


def _blocked_error(what: str, seconds: float, thread_id: int | None) -> TimeoutError:
    """The error of workflow code that did not yield by the deadline, showing the
    workflow thread's current stack (where the blocking call is)."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        where = " (it had not started: every workflow thread is busy with blocked code?)"
        stack = ""
    else:
        frames = traceback.extract_stack(frame)
        stack = "".join(traceback.format_list(frames))
        innermost = frames[-1] if frames else None
        where = (
            f" at {innermost.filename}:{innermost.lineno} in {innermost.name} ({innermost.line})"
            if innermost is not None
            else ""
        )
    error = TimeoutError(
        f"{what} did not finish within {seconds:g}s: the workflow thread is blocked{where}"
        " (blocking call in workflow code? use workflow.sleep() and activities)"
        + (f"\nWorkflow thread stack (most recent call last):\n{stack}" if stack else "")
    )
    # Reported as the failure's stack trace (failure_from_exception uses it).
    error.stack_trace = stack  # type: ignore[attr-defined]
    return error


def _index_workflows(classes: Iterable[type]) -> dict[tuple[str, str], WorkflowDefinition]:
    out: dict[tuple[str, str], WorkflowDefinition] = {}
    for cls in classes:
        definition = definition_of(cls)
        key = (definition.name, definition.version)
        first = out.get(key)
        if first is not None:  # the same class given twice is refused too
            name = f"{key[0]} (version {key[1]})"
            raise DuplicateRegistrationError(
                "workflow", name, None, source_of(first.cls), source_of(cls)
            )
        out[key] = definition
    return out


def _index_activities(functions: Iterable[Callable[..., Any]]) -> dict[str, ActivityDefinition]:
    out: dict[str, ActivityDefinition] = {}
    for fn in functions:
        definition = must_define(fn)
        first = out.get(definition.name)
        if first is not None:
            raise DuplicateRegistrationError(
                "activity", definition.name, None, source_of(first.fn), source_of(fn)
            )
        out[definition.name] = definition
    return out


def _carry_trace_context(commands: Sequence[workflow_task_pb2.Command]) -> None:
    """Stamps the current span's context (the workflow task's) on the activities and
    child workflows the decision starts, so their spans join the run's trace. Only live
    decisions are sent; the recorded ActivityScheduled event does not keep it (a child's
    WorkflowStarted does: its tasks' spans are children of this one)."""
    context = current_trace_context()
    if not context:
        return
    for command in commands:
        kind = command.WhichOneof("kind")
        if kind == "schedule_activity":
            command.schedule_activity.trace_context.update(context)
        elif kind == "start_child_workflow":
            command.start_child_workflow.trace_context.update(context)
