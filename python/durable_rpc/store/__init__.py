"""The durable store: runs, histories, tasks under fenced leases, timers, workers.

``open_store(url)`` builds a backend from a URL (call ``await store.open()`` or use
``async with``):

- ``sqlite:///relative/file.db``, ``sqlite:////absolute/file.db`` — a SQLite file;
- ``sqlite://:memory:`` — a private in-memory database (tests);
- ``postgresql://user:password@host:port/dbname`` (or ``postgres://``) — a PostgreSQL
  database any number of server replicas can share; store parameters ``pool_size`` and
  ``acquire_timeout`` and any libpq parameter go in the query string. Needs the
  ``postgres`` extra (psycopg 3), imported only when such a URL is used.
"""

from __future__ import annotations

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._admin_records import (
    ApiKeyLookup,
    ApiKeyRecord,
    MetricCounts,
    NamespaceRecord,
)
from durable_rpc.store._admission_records import Admission
from durable_rpc.store._budget_records import Budget
from durable_rpc.store._definition_records import CodeFingerprints, DefinitionRecord
from durable_rpc.store._fleet_records import (
    QueueBacklog,
    RateLimit,
    ServedDefinition,
    TaskQueueDescription,
    TaskQueueLimit,
    TaskQueueSummary,
    WorkerCounters,
    WorkerRecord,
)
from durable_rpc.store._ops import Store
from durable_rpc.store._options import HistoryLimits, StoreOptions, StoreStats
from durable_rpc.store._records import (
    RUN_STATUSES,
    ActivityCompletion,
    ActivityPoll,
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    DirectClaim,
    DueReport,
    EagerActivities,
    EagerWorkflowTask,
    HeartbeatResult,
    HistoryPage,
    InlineWorkflowTask,
    LeaseRef,
    PendingActivity,
    PendingUpdateRequest,
    RunDescription,
    RunInfo,
    RunOutcome,
    SignalWithStartResult,
    StartOptions,
    StartResult,
    StoreListener,
    TaskKind,
    UpdateWithStartResult,
    WorkflowTaskCompletion,
)
from durable_rpc.store._sqlite import SQLiteStore
from durable_rpc.store._stream_records import StreamAppend, StreamDescription, StreamPage

__all__ = [
    "Budget",
    "StreamAppend",
    "StreamDescription",
    "StreamPage",
    "Admission",
    "QueueBacklog",
    "RateLimit",
    "ServedDefinition",
    "TaskQueueDescription",
    "TaskQueueSummary",
    "TaskQueueLimit",
    "WorkerCounters",
    "WorkerRecord",
    "CodeFingerprints",
    "DefinitionRecord",
    "RUN_STATUSES",
    "ClaimedActivityTask",
    "ClaimedWorkflowTask",
    "DirectClaim",
    "WorkflowTaskCompletion",
    "DueReport",
    "ActivityCompletion",
    "ActivityPoll",
    "ApiKeyLookup",
    "ApiKeyRecord",
    "NamespaceRecord",
    "EagerActivities",
    "EagerWorkflowTask",
    "InlineWorkflowTask",
    "HeartbeatResult",
    "HistoryLimits",
    "HistoryPage",
    "LeaseRef",
    "PendingActivity",
    "PendingUpdateRequest",
    "RunDescription",
    "RunInfo",
    "RunOutcome",
    "SQLiteStore",
    "SignalWithStartResult",
    "StartOptions",
    "StartResult",
    "Store",
    "StoreListener",
    "StoreOptions",
    "MetricCounts",
    "StoreStats",
    "TaskKind",
    "UpdateWithStartResult",
    "open_store",
]

_SQLITE = "sqlite://"
_POSTGRES = ("postgresql://", "postgres://")


def open_store(url: str, options: StoreOptions | None = None) -> Store:
    """The store for ``url`` (not yet opened)."""
    if url.startswith(_SQLITE):
        rest = url[len(_SQLITE) :]
        if rest in (":memory:", "/:memory:"):
            return SQLiteStore(":memory:", options)
        if not rest.startswith("/") or len(rest) < 2:
            raise InvalidArgumentError(
                f"invalid SQLite URL {url!r}: use sqlite:///path/to/file.db or sqlite://:memory:"
            )
        return SQLiteStore(rest[1:], options)
    if url.startswith(_POSTGRES):
        try:
            from durable_rpc.store._postgres import PostgresStore
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise InvalidArgumentError(
                f"{url.split(':', 1)[0]} URLs need psycopg, which is not installed "
                "(pip install 'durable-rpc[postgres]')"
            ) from exc
        return PostgresStore(url, options)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise InvalidArgumentError(f"unsupported store URL scheme {scheme!r} in {url!r}")
