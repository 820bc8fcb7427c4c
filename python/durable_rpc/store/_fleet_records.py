"""The records of the fleet's reads (``_ops_fleet``): workers and task queues as an
operator sees them (AdminService.ListWorkers and DescribeTaskQueue)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerCounters:
    """What a worker counted since it started, sent with each heartbeat (never written
    on the task path: the numbers travel only with the heartbeat)."""

    claims: int = 0
    completions: int = 0
    failures: int = 0
    lease_losses: int = 0
    slots_in_use: int = 0
    slots_total: int = 0


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    worker_id: str
    task_queue: str
    #: '' : unversioned.
    build_id: str
    #: (name, version, fingerprint) of each workflow definition it registered.
    definitions: tuple[tuple[str, str, str], ...]
    activities: tuple[str, ...]
    registered_at_ms: int
    last_heartbeat_ms: int
    #: Within the store's liveness window (``StoreOptions.worker_liveness_ms``).
    live: bool
    #: As of its last heartbeat (zeros until the first one that carried them).
    counters: WorkerCounters


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """One task kind's open tasks on a queue, by state, as of ``now_ms``."""

    kind: str
    #: Visible now and not claimed.
    queued: int
    #: Leased, lease not expired.
    leased: int
    #: Not yet visible (a retry's backoff, a delayed start).
    waiting: int
    #: Leased, lease expired: the next claim (or due pass) recovers them.
    recoverable: int
    #: When the oldest queued task became visible (None: nothing queued).
    oldest_queued_at_ms: int | None
    #: The tasks in state queued by claim priority, most urgent first: (priority, count)
    #: (a retry whose backoff just ended counts in ``queued`` before its due pass, not
    #: here).
    queued_by_priority: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ServedDefinition:
    name: str
    version: str
    fingerprint: str
    #: Distinct build ids of the live workers registering it ('' : unversioned), sorted.
    build_ids: tuple[str, ...]
    live_workers: int


@dataclass(frozen=True, slots=True)
class TaskQueueSummary:
    """One task queue in a namespace's list (``Store.list_task_queues``)."""

    task_queue: str
    workflow_queued: int
    activity_queued: int
    open_tasks: int
    oldest_queued_at_ms: int | None
    workers: int
    live_workers: int


@dataclass(frozen=True, slots=True)
class TaskQueueDescription:
    task_queue: str
    #: The database clock when read (the oldest queued task's age is measured from it).
    now_ms: int
    #: One entry per kind: "workflow", then "activity".
    backlog: tuple[QueueBacklog, ...]
    #: The queue's live workers, by worker id.
    pollers: tuple[WorkerRecord, ...]
    #: What the live workers serve, by name then version.
    definitions: tuple[ServedDefinition, ...]
    #: The queue's limit on activity attempts leased at once (None: unlimited).
    max_concurrent_activities: int | None = None
    #: Activity attempts leased now (what the limit is checked against).
    activities_in_use: int = 0
    #: The namespace's rate limits (they apply to every queue of the namespace).
    rate_limits: tuple[RateLimit, ...] = ()


@dataclass(frozen=True, slots=True)
class TaskQueueLimit:
    """A task queue's limit on concurrent activity attempts, cluster-wide."""

    namespace: str
    task_queue: str
    max_concurrent_activities: int
    #: When it was last set (database clock).
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A namespace's rate limit on activity claims: ``permits`` per ``period_ms`` for
    one named downstream (scope ``key``) or one activity type (scope ``activity_type``)."""

    namespace: str
    scope: str
    name: str
    permits: int
    period_ms: int
    #: Claims that may go at once after a quiet time (the bucket's capacity).
    burst: int
    #: When the bucket next has a token (database clock; at or before now: it has one).
    next_token_ms: int
    #: When it was last set (database clock).
    updated_at_ms: int
