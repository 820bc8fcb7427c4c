"""The abstract store interface and the records it returns.

Every backend (SQLite now, PostgreSQL next) implements :class:`Store` and passes the same
test suite. Payload arguments are serialized ``payload_pb2.Payload`` bytes, failures
serialized ``payload_pb2.Failure`` bytes, history events serialized
``history_pb2.HistoryEvent`` bytes. Every time is integer milliseconds since the epoch,
read from the database clock.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Protocol

from durable_rpc._payload_refs import DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES
from durable_rpc.run_statuses import STATUSES
from durable_rpc.store._admission_records import Admission
from durable_rpc.store._budget_records import Budget
from durable_rpc.store._definition_records import CodeFingerprints, DefinitionRecord
from durable_rpc.store._fleet_records import (
    RateLimit,
    TaskQueueDescription,
    TaskQueueLimit,
    TaskQueueSummary,
    WorkerCounters,
    WorkerRecord,
)
from durable_rpc.store._payload_records import DEFAULT_PAYLOAD_QUOTA_BYTES, PayloadUpload
from durable_rpc.store._schedule_records import ScheduleDefinition, ScheduleFiring, ScheduleInfo
from durable_rpc.store._session_records import WorkerSessionRecord
from durable_rpc.store._stream_records import StreamAppend, StreamDescription, StreamPage
from durable_rpc.v1 import payload_pb2, workflow_task_pb2

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

TaskKind = Literal["workflow", "activity", "query"]

RUN_STATUSES: frozenset[str] = frozenset(STATUSES)


class StoreListener(Protocol):
    """Told about changes after the commit that caused them (on the store's event loop)."""

    def tasks_available(self, namespace: str, task_queue: str, kind: TaskKind) -> None:
        """A task of ``kind`` became claimable now on ``task_queue``."""

    def due_at(self, due_ms: int) -> None:
        """Something (timer, retry backoff, lease expiry, deadline) is due at ``due_ms``:
        call :meth:`Store.process_due` then (and wake pollers)."""

    def run_closed(self, namespace: str, run_id: str, outcome: RunOutcome | None = None) -> None:
        """The run reached a terminal status (``outcome``, when this process closed it)."""

    def query_answered(self, namespace: str, query_id: str) -> None:
        """A worker answered the query (read it with :meth:`Store.query_answer`)."""

    def update_changed(self, namespace: str, update_id: str) -> None:
        """A decision accepted, completed or rejected the update."""

    def stream_appended(self, namespace: str, run_id: str) -> None:
        """A message stream of the run got items (read them with :meth:`Store.read_stream`)."""


@dataclass(frozen=True, slots=True)
class HistoryLimits:
    """A run's history bounds, in events and in bytes (the sum of its serialized events).

    Past a hard limit new input (start, signal, update) is refused with
    HISTORY_LIMIT_EXCEEDED and a workflow task whose commands pass it fails the run with
    that reason. From a warn mark describe warns, the worker logs and
    ``workflow.info().continue_as_new_suggested`` is true. Defaults as Temporal's.
    """

    max_events: int = 51_200
    max_bytes: int = 50 * 1024 * 1024
    warn_events: int = 10_240
    warn_bytes: int = 10 * 1024 * 1024
    #: A history page (a claimed task's first page, each get_history page) holds events
    #: up to this many bytes, a larger single event alone: below the gRPC message limit.
    page_bytes: int = 4 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 < self.warn_events <= self.max_events:
            raise ValueError("history limits: need 0 < warn_events <= max_events")
        if not 0 < self.warn_bytes <= self.max_bytes:
            raise ValueError("history limits: need 0 < warn_bytes <= max_bytes")
        if self.page_bytes <= 0:
            raise ValueError("history limits: page_bytes must be positive")

    def exceeded(self, length: int, size_bytes: int) -> bool:
        return length > self.max_events or size_bytes > self.max_bytes

    def warned(self, length: int, size_bytes: int) -> bool:
        return length >= self.warn_events or size_bytes >= self.warn_bytes


@dataclass(frozen=True, slots=True)
class StoreOptions:
    """Tunables shared by every backend."""

    #: Backoff of a failed workflow task: min(initial * 2^(attempt-1), max).
    workflow_task_initial_backoff_ms: int = 100
    workflow_task_max_backoff_ms: int = 10_000
    #: A worker counts as live this long after its last heartbeat/registration.
    worker_liveness_ms: int = 60_000
    #: Lease of an activity attempt with no heartbeat/start_to_close/schedule_to_close.
    default_activity_lease_ms: int = 60_000
    #: How long a statement waits for a database lock before UNAVAILABLE.
    busy_timeout_ms: int = 5_000
    #: Most operations committed in one group-commit transaction.
    max_batch: int = 256
    #: Most due items of each kind handled by one process_due call.
    due_batch: int = 500
    #: Per-run history limits and the history page size.
    history: HistoryLimits = field(default_factory=HistoryLimits)
    #: The largest payload an upload may declare (the SDKs' default download cap).
    max_external_payload_bytes: int = DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES


@dataclass(slots=True)
class StoreStats:
    """Counters for tests and metrics (updated by the backend)."""

    #: Committed write transactions (one per group-commit batch).
    transactions: int = 0
    #: Write operations executed (committed or rolled back alone).
    operations: int = 0
    #: Write operations that raised and were rolled back alone.
    failed_operations: int = 0
    #: Batches aborted as a whole (database unusable); every caller got UNAVAILABLE.
    aborted_batches: int = 0
    #: Operations done by one server-side function call (PostgreSQL's hot path).
    hot_calls: int = 0
    #: Activity claims that found a visible task but left it queued: its task queue's
    #: concurrency limit was reached (``_queue_limits``).
    deferred_claims: int = 0
    #: Activity claims that found visible tasks but left them queued: their rate limit's
    #: bucket had no token (``_rate_limits``).
    rate_deferred_claims: int = 0
    #: Starts deferred (queued, not yet admitted) and refused by their namespace's
    #: admission policy (``_admission``).
    deferred_starts: int = 0
    refused_starts: int = 0


@dataclass(frozen=True, slots=True)
class LeaseRef:
    """The proof of ownership every write after a claim carries."""

    task_id: int
    worker_id: str
    fencing_token: int


@dataclass(frozen=True, slots=True)
class StartOptions:
    """Optional settings of a new run."""

    #: Serialized Memo (not indexed).
    memo: bytes | None = None
    #: Serialized SearchAttributes (typed, indexed; validated).
    search_attributes: bytes | None = None
    #: Close the run as timed_out this long after its start (None/0 = never).
    execution_timeout_ms: int | None = None
    run_timeout_ms: int | None = None
    #: 1 (most urgent) .. 5; None = 3. Claims take a more urgent task first (``_fairness``).
    priority: int | None = None
    #: Claims share a priority fairly among keys (e.g. a tenant); None/'' = no key.
    fairness_key: str | None = None
    #: The run's concurrency key (``_admission``): its namespace may limit the open runs
    #: of one key. None/'' = no key.
    concurrency_key: str | None = None


@dataclass(frozen=True, slots=True)
class StartResult:
    run_id: str
    #: False when the request id matched an earlier start (nothing new was created).
    started: bool
    #: The run's first workflow task, when the start was asked to claim it (``claim_for``).
    workflow_task: ClaimedWorkflowTask | None = None


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """A new run continuing a failed run from its last completed activity."""

    run_id: str
    #: The failed run's events the new run starts from (its events after this one are
    #: left out, as are the activity failures no kept decision saw).
    resumed_after_event_id: int
    #: Completed activities the new run keeps (their results replay).
    kept_activities: int
    #: False when the request id had already redriven the run.
    started: bool


@dataclass(frozen=True, slots=True)
class DirectClaim:
    """Claim the new run's first workflow task for ``worker_id`` in the starting
    transaction: the server hands it to that worker's waiting poll, saving a claim."""

    worker_id: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class SignalWithStartResult:
    run_id: str
    #: True when this call started the run.
    started: bool
    #: False when the request id had already been delivered to that run.
    delivered: bool


@dataclass(frozen=True, slots=True)
class RunInfo:
    workflow_id: str
    run_id: str
    workflow_type: str
    workflow_version: str
    task_queue: str
    status: str
    start_time_ms: int
    close_time_ms: int | None
    history_length: int
    #: The sum of the run's serialized events (what the byte limits count).
    history_size_bytes: int = 0
    #: Serialized Memo / SearchAttributes (describe and list_runs fill them).
    memo: bytes | None = None
    search_attributes: bytes | None = None


@dataclass(frozen=True, slots=True)
class PendingActivity:
    seq: int
    activity_type: str
    #: "queued", "leased" or "waiting" (backoff before a retry).
    state: str
    attempt: int
    last_failure: bytes | None
    worker_id: str | None
    #: "waiting": when the retry's backoff ends (database clock, epoch ms).
    next_attempt_ms: int | None = None
    #: "leased": when the attempt's lease runs out unless it heartbeats.
    lease_expires_ms: int | None = None
    #: The last heartbeat's details (a Payload), kept for the retries.
    heartbeat_details: bytes | None = None
    #: The worker session it runs in, if any.
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class NamespaceRecord:
    name: str
    description: str
    retention_ms: int
    created_at_ms: int
    #: The most bytes of payloads the namespace may hold, stored and being uploaded.
    payload_quota_bytes: int = DEFAULT_PAYLOAD_QUOTA_BYTES
    #: The bytes of payloads it holds now (stored whole, or reserved by an upload).
    payload_stored_bytes: int = 0


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    """An API key without its secret. ``namespace`` None: every namespace (admin only)."""

    key_id: str
    name: str
    role: str
    namespace: str | None
    created_at_ms: int
    expires_at_ms: int | None
    revoked_at_ms: int | None


@dataclass(frozen=True, slots=True)
class ApiKeyLookup:
    """A key found by its id, its stored hash, and the database clock read with it."""

    key: ApiKeyRecord
    secret_hash: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class RunDescription:
    info: RunInfo
    pending_activities: list[PendingActivity]
    last_workflow_task_failure: bytes | None
    workflow_task_attempt: int
    #: Whether a live worker polling the run's task queue registers its definition.
    definition_available: bool
    cancel_requested: bool
    #: Set from the history warn mark on: how close the run is to its hard limit.
    history_warning: str = ""
    #: For an open run whose definition is not available: why nothing runs it, in one
    #: plain sentence (workers claim only the definitions they registered). '' otherwise.
    definition_unavailable_reason: str = ""
    #: For an open run that makes no progress: what it waits for, in one plain sentence
    #: (``_stuck``). '' for a closed run or one making progress.
    stuck_reason: str = ""
    #: The build the run is pinned to ('' unversioned or not decided yet: _build_pins).
    build_id: str = ""
    #: Redrive links: the failed run this one continues, and the run that continues it.
    redriven_from_run_id: str = ""
    redriven_by_run_id: str = ""
    #: The run's claim priority (1 most urgent .. 5) and fairness key ('' none): its
    #: workflow and activity tasks are claimed in that order (``_fairness``).
    priority: int = 3
    fairness_key: str = ""


@dataclass(frozen=True, slots=True)
class HistoryPage:
    run_id: str
    events: list[bytes]
    has_more: bool


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_id: str
    #: "running" while the run is open.
    status: str
    result: bytes | None
    failure: bytes | None
    #: Status continued_as_new: the run that continues this one.
    next_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateWithStartResult:
    #: The run the update request was recorded on.
    run_id: str
    #: True when this call started the run.
    started: bool


@dataclass(frozen=True, slots=True)
class PendingUpdateRequest:
    """An update request waiting for the run's workflow task to accept or reject it."""

    update_id: str
    update_name: str
    #: The serialized Payload of its arguments.
    input: bytes


@dataclass(frozen=True, slots=True)
class ClaimedWorkflowTask:
    task_id: int
    worker_id: str
    fencing_token: int
    lease_expires_at_ms: int
    #: Database time of the claim: the workflow's clock for this task.
    workflow_time_ms: int
    attempt: int
    workflow_id: str
    run_id: str
    workflow_type: str
    workflow_version: str
    task_queue: str
    #: The history at claim time (serialized HistoryEvent): all of it, or its first
    #: byte-bounded page when ``len(events) < history_length`` (the rest: get_history
    #: with ``through_event_id=history_length``).
    events: list[bytes]
    #: The run's update requests no decision settled yet, oldest first.
    pending_updates: tuple[PendingUpdateRequest, ...] = ()
    #: The run's whole history at the claim: events and serialized bytes.
    history_length: int = 0
    history_size_bytes: int = 0
    #: Database time from the task becoming claimable (scheduled, backoff over, lease
    #: expired) to this claim; 0 when claimed in the transaction that made it claimable.
    queue_delay_ms: int = 0

    @property
    def lease(self) -> LeaseRef:
        return LeaseRef(self.task_id, self.worker_id, self.fencing_token)


@dataclass(frozen=True, slots=True)
class EagerActivities:
    """Eager activity dispatch: claim, in the completing transaction, up to ``limit`` of
    the activities a workflow task schedules on ``task_queue`` (of ``activity_types``) for
    the completing worker, saving it a poll round trip per activity."""

    task_queue: str
    activity_types: frozenset[str]
    limit: int


@dataclass(frozen=True, slots=True)
class EagerWorkflowTask:
    """Eager workflow task: when completing an activity makes its run's workflow task
    claimable on ``task_queue``, claim it for the completing worker in the same
    transaction."""

    task_queue: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class InlineWorkflowTask:
    """A workflow task decided ahead by a worker that keeps the run's history: the
    commands its code produced after the completing activity's result. Recorded in the
    activity completion's transaction only when the run's history still ends at
    ``last_seen_event_id`` (so that result is the task's only new input) and the run has
    no other workflow task; the marker's workflow time is that transaction's database
    time (the worker decides inline only when the code did not read the clock)."""

    run_id: str
    last_seen_event_id: int
    commands: Sequence[workflow_task_pb2.Command]
    build_id: str = ""
    eager: EagerActivities | None = None


@dataclass(frozen=True, slots=True)
class WorkflowTaskCompletion:
    """What a recorded workflow-task decision produced: the activity attempts claimed
    eagerly, every event the transaction appended to the run (in order) and the run's
    history length after it, so a sticky worker can extend its copy of the history."""

    eager_activities: list[ClaimedActivityTask]
    appended_events: list[bytes]
    history_length: int


@dataclass(frozen=True, slots=True)
class ActivityCompletion:
    """An activity completion's answer: ``inline`` when the inline workflow task was
    recorded with it, else the run's next workflow task if it was claimed eagerly."""

    workflow_task: ClaimedWorkflowTask | None = None
    inline: WorkflowTaskCompletion | None = None


@dataclass(frozen=True, slots=True)
class ClaimedActivityTask:
    task_id: int
    worker_id: str
    fencing_token: int
    lease_expires_at_ms: int
    workflow_id: str
    run_id: str
    seq: int
    activity_type: str
    input: bytes
    attempt: int
    #: Details of the last heartbeat of an earlier attempt.
    heartbeat_details: bytes | None
    heartbeat_timeout_ms: int | None
    start_to_close_timeout_ms: int | None
    #: Serialized ActivityOptions as scheduled.
    options: bytes
    #: The trace context the activity was scheduled with (empty: none).
    trace_context: Mapping[str, str] = field(default_factory=dict)
    #: As ClaimedWorkflowTask.queue_delay_ms.
    queue_delay_ms: int = 0
    #: The worker session the attempt runs in, as this claim left it (None: none).
    session: WorkerSessionRecord | None = None

    @property
    def lease(self) -> LeaseRef:
        return LeaseRef(self.task_id, self.worker_id, self.fencing_token)


@dataclass(frozen=True, slots=True)
class ActivityPoll:
    """A claim attempt's answer to a long poll: the task, or when to try again."""

    task: ClaimedActivityTask | None
    #: In how long (ms, by the database clock) an empty bucket of the namespace's rate
    #: limits next has a token: a task it holds back may be claimable then. None: only
    #: a wake-up helps.
    retry_in_ms: int | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    cancel_requested: bool
    lease_expires_at_ms: int
    #: The attempt's worker session as this heartbeat renewed it (None: no session, or
    #: not renewed: closed, past its TTL, another holder).
    session: WorkerSessionRecord | None = None


@dataclass(frozen=True, slots=True)
class MetricCounts:
    """What the server's metric gauges show (``Store.metric_counts``)."""

    #: Waiting tasks by kind: ``timer`` (durable timers), ``activity`` (retry backoffs,
    #: not-yet-due attempts), ``workflow`` (workflow-task backoffs).
    waiting: Mapping[str, int]
    #: Queued workflow tasks no live worker of their queue registers the definition of,
    #: by (namespace, task queue): runs that are stuck until one starts.
    definition_unavailable: Mapping[tuple[str, str], int]
    #: Budget reservations waiting for units, by (namespace, budget) (``_budgets``).
    budget_waiting: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DueReport:
    fired_timers: int
    expired_activity_attempts: int
    #: Earliest pending due time (waiting visibility, lease expiry, deadline), if any.
    next_due_ms: int | None
    db_now_ms: int


@dataclass(frozen=True, slots=True)
class RetentionBatch:
    """One retention transaction: closed runs deleted, and whether it was full (more
    runs past their retention may be left)."""

    deleted: int
    more: bool


class Store(abc.ABC):
    """The durable state of every namespace: runs, histories, tasks, leases, workers."""

    @property
    @abc.abstractmethod
    def stats(self) -> StoreStats: ...

    @property
    def options(self) -> StoreOptions:
        """The tunables this store applies (its history limits and page size included)."""
        return StoreOptions()

    @abc.abstractmethod
    async def open(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abc.abstractmethod
    async def now_ms(self) -> int: ...

    @abc.abstractmethod
    async def check_health(self) -> None:
        """A cheap probe that the store can serve now: returns, or raises
        StoreUnavailableError saying why not (SQLite: the file is gone, replaced or not
        writable; PostgreSQL: no connection). Changes nothing and counts in no stats.
        The server's grpc.health.v1 status follows it (server/_health.py)."""

    @abc.abstractmethod
    def set_listener(self, listener: StoreListener | None) -> None: ...

    @abc.abstractmethod
    def set_meter_provider(self, meter_provider: MeterProvider) -> None:
        """Record the duration and size of every write transaction on ``meter_provider``
        (a server exporting metrics calls it before ``open``); until then nothing is."""

    @abc.abstractmethod
    async def metric_counts(self) -> MetricCounts:
        """Waiting tasks by kind and definition-unavailable runs by queue: indexed counts
        for the server's gauges, read every few seconds while metrics are exported."""

    # schedules (``_ops_schedules``)
    @abc.abstractmethod
    async def create_schedule(
        self, namespace: str, schedule_id: str, definition: ScheduleDefinition
    ) -> None: ...

    @abc.abstractmethod
    async def update_schedule(
        self, namespace: str, schedule_id: str, definition: ScheduleDefinition
    ) -> None: ...

    @abc.abstractmethod
    async def delete_schedule(self, namespace: str, schedule_id: str) -> None: ...

    @abc.abstractmethod
    async def pause_schedule(
        self, namespace: str, schedule_id: str, paused: bool, note: str
    ) -> None: ...

    @abc.abstractmethod
    async def trigger_schedule(self, namespace: str, schedule_id: str) -> str: ...

    @abc.abstractmethod
    async def backfill_schedule(
        self, namespace: str, schedule_id: str, start_ms: int, end_ms: int
    ) -> int: ...

    @abc.abstractmethod
    async def describe_schedule(self, namespace: str, schedule_id: str) -> ScheduleInfo: ...

    @abc.abstractmethod
    async def list_schedules(
        self, namespace: str, limit: int = 100, after: str = ""
    ) -> list[ScheduleInfo]: ...

    @abc.abstractmethod
    async def fire_schedules(self) -> ScheduleFiring:
        """Fires every due schedule slot, once cluster-wide (``_ops_schedules``)."""

    # namespaces
    @abc.abstractmethod
    async def namespace_exists(self, namespace: str) -> bool: ...

    @abc.abstractmethod
    async def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` with default settings unless it exists (idempotent)."""

    # runs
    @abc.abstractmethod
    async def start_workflow(
        self,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        workflow_version: str,
        task_queue: str,
        input: bytes,
        request_id: str,
        trace_context: Mapping[str, str] | None = None,
        options: StartOptions | None = None,
        claim_for: DirectClaim | None = None,
    ) -> StartResult: ...

    @abc.abstractmethod
    async def signal_workflow(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        signal_name: str,
        input: bytes,
        request_id: str,
    ) -> bool: ...

    @abc.abstractmethod
    async def signal_with_start(
        self,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        workflow_version: str,
        task_queue: str,
        input: bytes,
        signal_name: str,
        signal_input: bytes,
        request_id: str,
        trace_context: Mapping[str, str] | None = None,
        options: StartOptions | None = None,
    ) -> SignalWithStartResult:
        """Signal the open run of ``workflow_id``, or start one and signal it, in one
        transaction. ``request_id`` deduplicates both the start and the signal."""

    @abc.abstractmethod
    async def request_cancel(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        reason: str,
        cleanup_timeout_ms: int | None = None,
    ) -> bool:
        """Asks the open run to cancel; False when it had been asked already (nothing
        recorded again, the first request's cleanup deadline kept). With
        ``cleanup_timeout_ms`` the run is terminated (reason CLEANUP_DEADLINE_EXCEEDED)
        by the due pass when still open that long after the request (database clock)."""

    @abc.abstractmethod
    async def terminate(
        self, namespace: str, workflow_id: str, run_id: str | None, reason: str
    ) -> None: ...

    @abc.abstractmethod
    async def describe(
        self, namespace: str, workflow_id: str, run_id: str | None
    ) -> RunDescription: ...

    @abc.abstractmethod
    async def redrive_workflow(
        self, namespace: str, workflow_id: str, run_id: str | None, request_id: str
    ) -> RedriveResult:
        """Starts a new run of a failed run (``run_id``, or the latest run of
        ``workflow_id``) that keeps its history up to its last completed activity
        (``_redrive_cut``); one transaction. WorkflowNotFailedError when the run did not
        fail; WorkflowAlreadyStartedError when a run of the id is open or the run was
        redriven already; a repeated ``request_id`` returns the run it created."""

    @abc.abstractmethod
    async def get_history(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        after_event_id: int,
        limit: int,
        through_event_id: int | None = None,
    ) -> HistoryPage:
        """Events after ``after_event_id`` (through ``through_event_id`` if given): at most
        ``limit`` and ``StoreOptions.history.page_bytes`` bytes (a larger single event
        alone), so a page always fits a message; ``has_more`` when more remain."""

    @abc.abstractmethod
    async def get_outcome(
        self, namespace: str, workflow_id: str, run_id: str | None
    ) -> RunOutcome: ...

    @abc.abstractmethod
    async def list_runs(
        self,
        namespace: str,
        status: str | None,
        workflow_type: str | None,
        started_after_ms: int | None,
        started_before_ms: int | None,
        limit: int,
        cursor: str | None,
        query: str | None = None,
    ) -> tuple[list[RunInfo], str | None]:
        """Newest first. ``query`` is the list query language (``_search``)."""

    @abc.abstractmethod
    async def count_runs(
        self,
        namespace: str,
        status: str | None,
        workflow_type: str | None,
        started_after_ms: int | None,
        started_before_ms: int | None,
        query: str | None = None,
    ) -> dict[str, int]:
        """The runs ``list_runs`` with the same filter would list, counted by status (a
        status no run has is absent); one grouped statement, no paging."""

    # workers
    @abc.abstractmethod
    async def register_worker(
        self,
        namespace: str,
        worker_id: str,
        task_queue: str,
        definitions: Sequence[tuple[str, str, str]],
        activities: Sequence[str],
        build_id: str,
        allow_definition_change: bool,
        declared_signals: Mapping[tuple[str, str], Sequence[str]] | None = None,
        fingerprints: Mapping[tuple[str, str], CodeFingerprints] | None = None,
    ) -> None:
        """``declared_signals``: by (name, version), the only signal names a run of that
        code reads (the definition keeps them; signals to its runs are checked against
        them, ``_declared_signals``). A definition not in it accepts every name.
        ``fingerprints``: by (name, version), the algorithm of its fingerprint and its
        fingerprints under earlier algorithms (``_definition_fingerprints``); a
        definition not in it names no algorithm. A changed fingerprint refused while
        open runs are pinned raises one DefinitionChangedError naming every such
        definition."""

    @abc.abstractmethod
    async def worker_heartbeat(
        self, namespace: str, worker_id: str, counters: WorkerCounters | None = None
    ) -> None:
        """Marks the worker live; ``counters`` (what it counted so far) replace its last
        report (None keeps it)."""

    @abc.abstractmethod
    async def deregister_worker(self, namespace: str, worker_id: str) -> None: ...

    # the fleet (see _ops_fleet)
    @abc.abstractmethod
    async def list_workers(
        self, namespace: str, task_queue: str | None, include_dead: bool
    ) -> list[WorkerRecord]:
        """By task queue, then worker id; live ones only unless ``include_dead``."""

    @abc.abstractmethod
    async def describe_task_queue(self, namespace: str, task_queue: str) -> TaskQueueDescription:
        """Backlog by kind, live workers (pollers) and what they serve."""

    @abc.abstractmethod
    async def list_task_queues(
        self, namespace: str, limit: int = 1000
    ) -> tuple[list[TaskQueueSummary], bool]:
        """Every queue with an open task or a registered worker, by name, the first
        ``limit``; and whether there were more."""

    # task-queue limits (see _ops_limits)
    @abc.abstractmethod
    async def set_task_queue_limit(
        self, namespace: str, task_queue: str, max_concurrent_activities: int | None
    ) -> TaskQueueLimit | None:
        """Sets (None: removes) the queue's limit on activity attempts leased at once,
        enforced by every activity claim (polls and eager claims). Returns the limit now
        in force. InvalidArgumentError for a limit below 1."""

    @abc.abstractmethod
    async def list_task_queue_limits(self, namespace: str) -> list[TaskQueueLimit]:
        """The namespace's limits, by task queue."""

    # rate limits (see _ops_rate_limits, _rate_limits)
    @abc.abstractmethod
    async def set_rate_limit(
        self,
        namespace: str,
        scope: str,
        name: str,
        permits: int,
        period_ms: int,
        burst: int | None = None,
    ) -> RateLimit:
        """Sets the namespace's rate limit of ``scope`` (``key``: attempts scheduled with
        rate_limit_key ``name``; ``activity_type``: attempts of type ``name`` scheduled
        without a key): at most ``permits`` claims per ``period_ms``, ``burst`` (default
        ``permits``) at once; it starts from a full bucket. InvalidRateLimitError out of
        range."""

    @abc.abstractmethod
    async def remove_rate_limit(self, namespace: str, scope: str, name: str) -> None:
        """Removes it; NotFoundError when there is none."""

    @abc.abstractmethod
    async def list_rate_limits(self, namespace: str) -> list[RateLimit]:
        """The namespace's rate limits, by scope then name."""

    # worker sessions (see _ops_sessions, _sessions)
    @abc.abstractmethod
    async def register_worker_sessions(
        self, namespace: str, worker_id: str, capabilities: Mapping[str, str], max_sessions: int
    ) -> None:
        """Records that the registered worker takes sessions, with these capabilities and
        at most ``max_sessions`` live ones held at once (replacing what it registered).
        NotFoundError for a worker that is not registered; InvalidSessionOptionsError."""

    @abc.abstractmethod
    async def create_worker_session(
        self, namespace: str, worker_id: str, task_queue: str, options: bytes
    ) -> WorkerSessionRecord:
        """Creates the session ``options.session_id`` held by ``worker_id`` (or returns it
        when that worker holds it live; takes it over when its holder was lost).
        SessionHeldError, SessionClosedError, SessionRequirementsUnmetError,
        SessionSlotsExhaustedError, InvalidSessionOptionsError."""

    @abc.abstractmethod
    async def renew_worker_session(
        self, namespace: str, worker_id: str, session_id: str, generation: int
    ) -> WorkerSessionRecord:
        """Extends the holder's lease by the session's lease length (never past its TTL),
        fenced by holder and generation: SessionLostError otherwise, SessionClosedError
        once closed, SessionNotFoundError."""

    @abc.abstractmethod
    async def close_worker_session(
        self, namespace: str, worker_id: str, session_id: str, generation: int, reason: str
    ) -> WorkerSessionRecord:
        """Closes it (fenced like renew; closing a closed one returns it) and fails its
        queued activities with SessionClosed, in one transaction."""

    @abc.abstractmethod
    async def describe_worker_session(self, namespace: str, session_id: str) -> WorkerSessionRecord:
        """The session as of now (``lost``: its holder's lease lapsed).
        SessionNotFoundError."""

    @abc.abstractmethod
    async def list_worker_sessions(
        self, namespace: str, task_queue: str, limit: int, after: str = ""
    ) -> list[WorkerSessionRecord]:
        """The open (not closed) sessions of ``task_queue`` as of now, by session id,
        at most ``limit`` of them with an id after ``after``."""

    # message streams (see _ops_streams, _streams)
    @abc.abstractmethod
    async def append_stream(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        stream: str,
        items: Sequence[tuple[str, payload_pb2.Payload]],
    ) -> StreamAppend:
        """Appends (dedup id, payload) items to a stream of the open run in one
        transaction; an item whose dedup id is in the stream already keeps its offset.
        WorkflowNotRunningError when the run is closed; StreamBatchTooLargeError past
        100 items; InvalidArgumentError for a bad name or dedup id."""

    @abc.abstractmethod
    async def read_stream(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        stream: str,
        offset: int,
        limit: int,
    ) -> StreamPage:
        """One bounded page from ``offset`` (``limit`` 0: 100 items); a stream nothing
        was appended to gives an empty page."""

    @abc.abstractmethod
    async def describe_stream(
        self, namespace: str, workflow_id: str, run_id: str | None, stream: str
    ) -> StreamDescription:
        """The stream's length and whether its run is open."""

    # budgets (see _ops_budgets, _budgets)
    @abc.abstractmethod
    async def set_budget(
        self,
        namespace: str,
        name: str,
        capacity: int,
        refill_units: int = 0,
        refill_period_ms: int = 0,
    ) -> Budget:
        """Creates or changes a budget; a raised capacity grants the waiting reservations
        that now fit, a lowered one refuses those larger than it. One transaction. With a
        refill (``refill_units`` per ``refill_period_ms``), released units come back at
        that rate instead of at once. InvalidArgumentError for a capacity outside
        1..10^15 or a refill that is not 1..10^15 units per 1 ms..31 days (or 0, 0)."""

    @abc.abstractmethod
    async def list_budgets(self, namespace: str) -> list[Budget]:
        """The namespace's budgets by name, with units held and reservations waiting."""

    @abc.abstractmethod
    async def remove_budget(self, namespace: str, name: str) -> None:
        """NotFoundError if there is no such budget; BudgetInUseError while a
        reservation holds or waits for it."""

    # namespace admission (see _ops_admission, _admission)
    @abc.abstractmethod
    async def set_namespace_admission(
        self,
        namespace: str,
        max_open_runs: int | None,
        starts_per_period: int | None,
        period_ms: int | None,
        over_limit: str,
        max_per_key: int | None = None,
        key_strategy: str = "queue",
    ) -> Admission:
        """Sets the namespace's admission policy: at most ``max_open_runs`` admitted open
        runs, at most ``starts_per_period`` starts admitted per ``period_ms`` (a token
        bucket), over the limit ``queue`` (the run waits, not yet admitted) or
        ``refuse`` (AdmissionLimitError). ``max_per_key``: admitted open runs of one
        concurrency key (StartOptions.concurrency_key) at once; over it ``key_strategy``
        ``queue`` (wait), ``cancel_newest`` (ConcurrencyKeyLimitError) or
        ``cancel_oldest`` (the key's oldest open run is cancelled; the new one waits for
        its close). Room it frees admits waiting runs at once. InvalidArgumentError for
        a policy out of bounds or with no limit."""

    @abc.abstractmethod
    async def remove_namespace_admission(self, namespace: str) -> None:
        """Removes the policy (idempotent); every waiting run is admitted."""

    @abc.abstractmethod
    async def get_namespace_admission(self, namespace: str) -> Admission | None:
        """The policy with its admitted open runs and waiting runs (None: no policy)."""

    # definitions (see _ops_definitions)
    @abc.abstractmethod
    async def list_definitions(self, namespace: str) -> list[DefinitionRecord]:
        """By name, then version, with their live workers and open runs."""

    @abc.abstractmethod
    async def remove_definition(self, namespace: str, name: str, version: str) -> DefinitionRecord:
        """DefinitionInUseError while a live worker registers it or an open run references
        it; NotFoundError if never registered. Idempotent; one transaction."""

    @abc.abstractmethod
    async def restore_definition(self, namespace: str, name: str, version: str) -> DefinitionRecord:
        """Undoes remove_definition (idempotent); NotFoundError if never registered."""

    # workflow tasks
    @abc.abstractmethod
    async def claim_workflow_task(
        self, namespace: str, task_queue: str, worker_id: str, lease_ms: int
    ) -> ClaimedWorkflowTask | None: ...

    async def complete_workflow_task(
        self,
        namespace: str,
        lease: LeaseRef,
        last_seen_event_id: int,
        commands: Sequence[workflow_task_pb2.Command],
        build_id: str = "",
        eager: EagerActivities | None = None,
    ) -> list[ClaimedActivityTask]:
        completion = await self.complete_workflow_task_tracked(
            namespace, lease, last_seen_event_id, commands, build_id, eager
        )
        return completion.eager_activities

    @abc.abstractmethod
    async def complete_workflow_task_tracked(
        self,
        namespace: str,
        lease: LeaseRef,
        last_seen_event_id: int,
        commands: Sequence[workflow_task_pb2.Command],
        build_id: str = "",
        eager: EagerActivities | None = None,
        rejected_updates: Sequence[tuple[str, bytes]] = (),
    ) -> WorkflowTaskCompletion:
        """``complete_workflow_task``, also answering the events it appended.
        ``rejected_updates``: (update id, serialized Failure) of the pending update
        requests the workflow's validators rejected."""

    @abc.abstractmethod
    async def fail_workflow_task(
        self, namespace: str, lease: LeaseRef, failure: bytes
    ) -> int | None:
        """Fail the leased workflow task; it is retried after a backoff: that backoff in
        ms (None when this lease's outcome was already recorded)."""

    @abc.abstractmethod
    async def release_workflow_task(self, namespace: str, lease: LeaseRef) -> bool:
        """Give a claimed workflow task back unchanged (queued again, claimable at once),
        e.g. when the worker it was claimed for left before it could be handed over.
        Fenced like every write after a claim; False when the lease no longer holds."""

    @abc.abstractmethod
    async def lease_holds(self, namespace: str, lease: LeaseRef) -> bool:
        """Whether ``lease`` is still its task's (leased to that worker under that token,
        not expired by the database clock), as last committed; changes nothing. A
        retried poll asks it before it hands the task its lost attempt claimed again."""

    @abc.abstractmethod
    async def has_claimable_task(self, namespace: str, task_queue: str, kind: TaskKind) -> bool:
        """Whether a ``kind`` task of the queue is claimable now by someone (any activity
        type, any definition), as last committed. A woken poll asks it before passing its
        wake-up on: when nothing is left, the wake-up has nobody to reach."""

    # activity tasks
    @abc.abstractmethod
    async def claim_activity_task(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        activity_types: Sequence[str],
    ) -> ClaimedActivityTask | None: ...

    async def poll_activity_task(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        activity_types: Sequence[str],
    ) -> ActivityPoll:
        """``claim_activity_task`` for a long poll: with no task, also when a task held
        back by a rate limit may be claimable (``ActivityPoll.retry_in_ms``)."""
        return ActivityPoll(
            await self.claim_activity_task(namespace, task_queue, worker_id, activity_types)
        )

    @abc.abstractmethod
    async def heartbeat_activity_task(
        self, namespace: str, lease: LeaseRef, details: bytes | None
    ) -> HeartbeatResult: ...

    async def complete_activity_task(
        self,
        namespace: str,
        lease: LeaseRef,
        result: bytes,
        eager: EagerWorkflowTask | None = None,
    ) -> ClaimedWorkflowTask | None:
        completion = await self.complete_activity_task_inline(namespace, lease, result, eager)
        return completion.workflow_task

    @abc.abstractmethod
    async def complete_activity_task_inline(
        self,
        namespace: str,
        lease: LeaseRef,
        result: bytes,
        eager: EagerWorkflowTask | None = None,
        inline: InlineWorkflowTask | None = None,
    ) -> ActivityCompletion:
        """``complete_activity_task``, recording ``inline`` with it when it still holds."""

    @abc.abstractmethod
    async def fail_activity_task(
        self, namespace: str, lease: LeaseRef, failure: bytes
    ) -> int | None:
        """Fail the leased attempt: the delay in ms before its retry, None when it is not
        retried (failed for good, cancelled, or this lease's outcome already recorded)."""

    # update requests waiting for a workflow task (see _ops_updates)
    @abc.abstractmethod
    async def request_update(
        self, namespace: str, run_id: str, update_id: str, update_name: str, input: bytes
    ) -> bool:
        """Holds the request for the run's next workflow tasks (idempotent by id) and
        makes sure one is queued. False when the run is not running."""

    @abc.abstractmethod
    async def update_with_start(
        self,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        workflow_version: str,
        task_queue: str,
        input: bytes,
        update_id: str,
        update_name: str,
        update_input: bytes,
        trace_context: Mapping[str, str] | None = None,
        options: StartOptions | None = None,
    ) -> UpdateWithStartResult:
        """``request_update`` on the open run of ``workflow_id``, or on a run this call
        starts (one transaction; ``update_id`` is also the start's request id)."""

    @abc.abstractmethod
    async def update_rejection(self, namespace: str, run_id: str, update_id: str) -> bytes | None:
        """The serialized Failure of a rejected request (kept a day), else None."""

    @abc.abstractmethod
    async def forget_update(self, namespace: str, run_id: str, update_id: str) -> None:
        """Drops a pending request (its caller gave up on a run that closed)."""

    # queries in flight (see _ops_queries)
    @abc.abstractmethod
    async def submit_query(
        self,
        namespace: str,
        task_queue: str,
        query_id: str,
        definition: tuple[str, str],
        task: bytes,
        timeout_ms: int,
        *,
        run_id: str | None = None,
    ) -> None:
        """Queues a query of ``run_id`` (whose build pin it carries: None, no pin)."""

    @abc.abstractmethod
    async def take_query(
        self,
        namespace: str,
        task_queue: str,
        definitions: Collection[tuple[str, str]],
        *,
        worker_id: str = "",
    ) -> bytes | None:
        """Takes the oldest query ``worker_id`` may answer (its definitions and build)."""

    @abc.abstractmethod
    async def answer_query(self, namespace: str, query_id: str, answer: bytes) -> bool: ...

    @abc.abstractmethod
    async def query_answer(self, namespace: str, query_id: str) -> bytes | None: ...

    @abc.abstractmethod
    async def forget_query(self, namespace: str, query_id: str) -> None: ...

    # time
    @abc.abstractmethod
    async def process_due(self) -> DueReport: ...

    # retention and cluster-wide maintenance jobs (see _ops_retention)
    @abc.abstractmethod
    async def take_maintenance_lease(self, job: str, owner: str, ttl_ms: int) -> bool:
        """Take, renew or take over (once expired, by the database clock) the lease of a
        cluster-wide background job for ``ttl_ms``; False while another owner holds it."""

    @abc.abstractmethod
    async def release_maintenance_lease(self, job: str, owner: str) -> None:
        """Give the lease up (if ``owner`` holds it), so another replica need not wait."""

    @abc.abstractmethod
    async def delete_expired_runs(self, owner: str, limit: int, max_events: int) -> RetentionBatch:
        """Delete up to ``limit`` closed runs whose close time is older than their
        namespace's retention, with every row of them, in one transaction holding at most
        ``max_events`` of their history events (a longer history goes over several,
        newest events first, the run with the last). Fenced by the 'retention'
        maintenance lease: LEASE_LOST unless ``owner`` holds it unexpired."""

    @abc.abstractmethod
    async def delete_gone_workers(self, owner: str, limit: int) -> int:
        """Delete up to ``limit`` workers whose last heartbeat is older than their
        namespace's retention, with their registered definitions and activities, in one
        transaction; the count. Fenced like :meth:`delete_expired_runs`."""

    # the payload store (see _ops_payloads): frames over the inline threshold, by SHA-256
    @abc.abstractmethod
    async def upload_payload_chunk(
        self,
        namespace: str,
        sha256: bytes,
        size: int,
        offset: int,
        data: bytes,
        uploader: str = "",
    ) -> PayloadUpload:
        """Store ``data`` at ``offset`` of ``uploader``'s upload of the payload
        ``(sha256, size)``: the offset at most the bytes stored, only the bytes past them
        kept. The chunk that completes it has the whole frame verified against ``sha256``
        (``PayloadMismatchError`` and the upload discarded when it does not). Each
        uploader's unfinished upload is its own, so none can block another's. A payload
        already stored whole answers complete at once (and its grace period restarts).
        ``PayloadTooLargeError`` past ``max_external_payload_bytes``,
        ``PayloadQuotaExceededError`` past the namespace's payload quota."""

    @abc.abstractmethod
    def read_payload(self, namespace: str, sha256: bytes, size: int) -> AsyncIterator[bytes]:
        """The stored frame of ``(sha256, size)`` in chunks, a few rows per read, verified
        while read: ``PayloadNotFoundError`` when the namespace does not hold it whole,
        ``PayloadCorruptError`` (before the last chunk) when it does not verify."""

    @abc.abstractmethod
    async def delete_unreferenced_payloads(self, owner: str, grace_ms: int, limit: int) -> int:
        """Delete up to ``limit`` payloads referenced by no remaining run and last uploaded
        more than ``grace_ms`` ago, in one transaction; the count. Fenced like
        :meth:`delete_expired_runs`."""

    @abc.abstractmethod
    async def signing_secret(self, name: str) -> bytes:
        """The server secret ``name`` (made at first use, the same on every replica)."""

    # namespaces and API keys (see _ops_admin)
    @abc.abstractmethod
    async def create_namespace(
        self, name: str, description: str, retention_ms: int | None
    ) -> NamespaceRecord: ...

    @abc.abstractmethod
    async def describe_namespace(self, name: str) -> NamespaceRecord: ...

    @abc.abstractmethod
    async def list_namespaces(self) -> list[NamespaceRecord]: ...

    @abc.abstractmethod
    async def update_namespace(
        self,
        name: str,
        description: str | None,
        retention_ms: int | None,
        payload_quota_bytes: int | None = None,
    ) -> NamespaceRecord: ...

    @abc.abstractmethod
    async def create_api_key(
        self,
        key_id: str,
        secret_hash: str,
        role: str,
        namespace: str | None,
        name: str,
        expires_in_ms: int | None,
    ) -> ApiKeyRecord: ...

    @abc.abstractmethod
    async def list_api_keys(self, namespace: str | None) -> list[ApiKeyRecord]: ...

    @abc.abstractmethod
    async def revoke_api_key(self, key_id: str, namespace: str | None) -> ApiKeyRecord: ...

    @abc.abstractmethod
    async def lookup_api_key(self, key_id: str) -> ApiKeyLookup | None: ...
