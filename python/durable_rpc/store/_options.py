"""The store's tunables (``StoreOptions``, with the per-run ``HistoryLimits``) and the
counters a backend keeps (``StoreStats``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from durable_rpc._payload_refs import DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES


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
