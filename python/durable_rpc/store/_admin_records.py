"""What the store answers about namespaces, API keys and its own upkeep: namespace and
key records, a retention batch, the metric gauges' counts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from durable_rpc.store._payload_records import DEFAULT_PAYLOAD_QUOTA_BYTES


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
class RetentionBatch:
    """One retention transaction: closed runs deleted, and whether it was full (more
    runs past their retention may be left)."""

    deleted: int
    more: bool


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
