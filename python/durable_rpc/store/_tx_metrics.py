"""Metrics of the store's write transactions, recorded by each backend's runner.

Every write of a store passes through one runner: SQLite's writer thread commits a
group of operations per transaction (``_sqlite._run_batch``), PostgreSQL commits one per
operation (``_postgres._attempts``) or runs a hot-path function call that commits itself
(``_postgres._call_once``). Each calls :meth:`TxMetrics.record` once per transaction; the
counts come from the store's :class:`StoreStats`, which the runners keep anyway.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from durable_rpc.store._options import StoreStats
from durable_rpc.telemetry._common import SCOPE
from durable_rpc.telemetry._metrics import SECONDS_BUCKETS

TxOutcome = Literal["committed", "rolled_back", "aborted"]


class TxMetrics:
    """- ``durable_rpc.store_transaction_duration`` histogram, s {store, outcome}: one
      write transaction, commit included; ``committed``, ``rolled_back`` (every operation
      raised and was undone) or ``aborted`` (the whole batch failed: the database is
      unusable).
    - ``durable_rpc.store_transactions`` counter {store}: committed write transactions.
    - ``durable_rpc.store_operations`` counter {store, outcome}: write operations,
      ``committed`` or ``failed`` (rolled back alone). Operations over transactions is the
      mean batch size (SQLite's group commit; 1 on PostgreSQL).
    - ``durable_rpc.activity_claims_deferred`` counter {store, reason}: activity claims
      that left a visible task queued, ``reason`` ``concurrency`` (its task queue's
      concurrency limit was reached, ``_queue_limits``) or ``rate_limit`` (its rate
      limit's bucket had no token, ``_rate_limits``): a deferral, never silent.
    - ``durable_rpc.workflow_starts_deferred`` / ``durable_rpc.workflow_starts_refused``
      counters {store}: starts their namespace's admission policy queued as not yet
      admitted, or refused with ADMISSION_LIMIT (``_admission``).
    """

    def __init__(
        self, store: str, stats: StoreStats, meter_provider: metrics.MeterProvider | None = None
    ) -> None:
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self._store = store
        self._stats = stats
        self._duration = meter.create_histogram(
            "durable_rpc.store_transaction_duration",
            unit="s",
            description="Duration of one store write transaction, commit included",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        meter.create_observable_counter(
            "durable_rpc.store_transactions",
            callbacks=[self._observe_transactions],
            unit="{transaction}",
            description="Committed store write transactions",
        )
        meter.create_observable_counter(
            "durable_rpc.store_operations",
            callbacks=[self._observe_operations],
            unit="{operation}",
            description="Store write operations, committed or failed",
        )
        meter.create_observable_counter(
            "durable_rpc.activity_claims_deferred",
            callbacks=[self._observe_deferred],
            unit="{claim}",
            description="Activity claims deferred by a concurrency or rate limit",
        )
        meter.create_observable_counter(
            "durable_rpc.workflow_starts_deferred",
            callbacks=[self._observe_deferred_starts],
            unit="{start}",
            description="Workflow starts queued, not yet admitted, by namespace admission",
        )
        meter.create_observable_counter(
            "durable_rpc.workflow_starts_refused",
            callbacks=[self._observe_refused_starts],
            unit="{start}",
            description="Workflow starts refused by namespace admission (ADMISSION_LIMIT)",
        )
        # Built once: the label sets are few and fixed (this runs on every commit).
        self._labels = {
            outcome: {"store": store, "outcome": outcome}
            for outcome in ("committed", "rolled_back", "aborted")
        }

    def record(self, outcome: TxOutcome, duration_s: float) -> None:
        self._duration.record(duration_s, self._labels[outcome])

    def _observe_transactions(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._stats.transactions, {"store": self._store})]

    def _observe_operations(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self._stats
        failed = stats.failed_operations
        return [
            Observation(stats.operations - failed, {"store": self._store, "outcome": "committed"}),
            Observation(failed, {"store": self._store, "outcome": "failed"}),
        ]

    def _observe_deferred(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(
                self._stats.deferred_claims, {"store": self._store, "reason": "concurrency"}
            ),
            Observation(
                self._stats.rate_deferred_claims, {"store": self._store, "reason": "rate_limit"}
            ),
        ]

    def _observe_deferred_starts(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._stats.deferred_starts, {"store": self._store})]

    def _observe_refused_starts(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(self._stats.refused_starts, {"store": self._store})]
