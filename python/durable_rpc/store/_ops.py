"""The store: every operation, written once against :class:`Tx` (dialect-independent SQL).

A backend subclasses :class:`Store` and supplies ``open``, ``close``, ``check_health``,
``_write`` (runs a function inside a write transaction, answers after the commit, then
delivers the function's notes to the listener) and ``_read`` (runs a function on a
consistent read snapshot). Every ``now`` comes from ``tx.now_ms()``: the database clock,
read inside the transaction that uses it. Payload arguments are serialized
``payload_pb2.Payload`` bytes, failures serialized ``payload_pb2.Failure`` bytes, history
events serialized ``history_pb2.HistoryEvent`` bytes; every time is integer milliseconds
since the epoch.

``Store`` is composed of parts, one module each (``_ops_*.py``): runs, workflow tasks,
the commands a decision applies, activity tasks, due work, leases, workers, queries and
update requests. A part subclasses the parts it calls; ``_ops_base`` holds what they all
rely on. Each operation's docstring, on the part that implements it, is its contract.
"""

from __future__ import annotations

from types import TracebackType

from opentelemetry.metrics import MeterProvider

from durable_rpc.store._ops_activities import _ActivityOps
from durable_rpc.store._ops_admin import _AdminOps
from durable_rpc.store._ops_admission import _AdmissionOps
from durable_rpc.store._ops_budgets import _BudgetOps
from durable_rpc.store._ops_commands import _CommandOps
from durable_rpc.store._ops_definitions import _DefinitionOps
from durable_rpc.store._ops_due import _DueOps
from durable_rpc.store._ops_fleet import _FleetOps
from durable_rpc.store._ops_leases import _LeaseOps
from durable_rpc.store._ops_limits import _LimitOps
from durable_rpc.store._ops_metrics import _MetricOps
from durable_rpc.store._ops_payloads import _PayloadOps
from durable_rpc.store._ops_queries import _QueryOps
from durable_rpc.store._ops_rate_limits import _RateLimitOps
from durable_rpc.store._ops_redrive import _RedriveOps
from durable_rpc.store._ops_retention import _RetentionOps
from durable_rpc.store._ops_runs import _RunOps
from durable_rpc.store._ops_schedules import _ScheduleOps
from durable_rpc.store._ops_secrets import _SecretOps
from durable_rpc.store._ops_sessions import _SessionOps
from durable_rpc.store._ops_streams import _StreamOps
from durable_rpc.store._ops_updates import _UpdateOps
from durable_rpc.store._ops_workers import _WorkerOps
from durable_rpc.store._ops_workflow_tasks import _WorkflowTaskOps
from durable_rpc.store._options import StoreOptions, StoreStats
from durable_rpc.store._records import StoreListener
from durable_rpc.store._shared import require
from durable_rpc.store._tx import Tx
from durable_rpc.store._tx_metrics import TxMetrics


class Store(
    _RunOps,
    _DueOps,
    _ActivityOps,
    _WorkflowTaskOps,
    _LeaseOps,
    _RedriveOps,
    _CommandOps,
    _WorkerOps,
    _FleetOps,
    _LimitOps,
    _BudgetOps,
    _AdmissionOps,
    _DefinitionOps,
    _QueryOps,
    _UpdateOps,
    _AdminOps,
    _RetentionOps,
    _PayloadOps,
    _MetricOps,
    _ScheduleOps,
    _RateLimitOps,
    _SessionOps,
    _StreamOps,
    _SecretOps,
):
    """The durable state of every namespace: runs, histories, tasks, leases, workers.

    The dialect-independent half of a SQL backend (``SQLiteStore``, ``PostgresStore``)."""

    #: The ``store`` label of the transaction metrics.
    BACKEND = "sql"

    def __init__(self, options: StoreOptions | None = None) -> None:
        self._options = options or StoreOptions()
        self._listener: StoreListener | None = None
        self._stats = StoreStats()
        # Shared by every transaction of this store (see Tx.known_namespaces).
        self.known_namespaces: set[str] = set()
        # Set by a server that exports metrics; None: nothing is recorded per commit.
        self._tx_metrics: TxMetrics | None = None

    @property
    def options(self) -> StoreOptions:
        """The tunables this store applies (its history limits and page size included)."""
        return self._options

    @property
    def stats(self) -> StoreStats:
        return self._stats

    # -- what a backend supplies ----------------------------------------------------------

    async def open(self) -> None:
        """Connects to the database, migrates its schema and starts accepting operations
        (once per store: StoreUnavailableError when opened already)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Stops accepting operations, answers the ones already accepted, then closes the
        database connections."""
        raise NotImplementedError

    async def check_health(self) -> None:
        """A cheap probe that the store can serve now: returns, or raises
        StoreUnavailableError saying why not (SQLite: the file is gone, replaced or not
        writable; PostgreSQL: no connection). Changes nothing and counts in no stats.
        The server's grpc.health.v1 status follows it (server/_health.py)."""
        raise NotImplementedError

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

    def set_listener(self, listener: StoreListener | None) -> None:
        self._listener = listener

    def set_meter_provider(self, meter_provider: MeterProvider) -> None:
        """Record the duration and size of every write transaction on ``meter_provider``
        (a server exporting metrics calls it before ``open``); until then nothing is."""
        self._tx_metrics = TxMetrics(self.BACKEND, self._stats, meter_provider)

    # -- clock and namespaces -------------------------------------------------------------

    async def now_ms(self) -> int:
        return await self._read(lambda tx: tx.now_ms())

    async def namespace_exists(self, namespace: str) -> bool:
        def op(tx: Tx) -> bool:
            return tx.one("SELECT name FROM namespaces WHERE name = ?", (namespace,)) is not None

        return await self._read(op)

    async def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` with default settings unless it exists (idempotent)."""
        require(namespace, "namespace")

        def op(tx: Tx) -> None:
            tx.run(
                "INSERT INTO namespaces (name, created_at_ms) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (namespace, tx.now_ms()),
            )

        await self._write(op)
