"""The server's metrics: the task-level instruments it records, long polls waiting, and
gauges of durable waits and definition-unavailable runs refreshed in the background."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from durable_rpc._tasks import STOP_TIMEOUT_S, stop_task
from durable_rpc.store import MetricCounts, Store, TaskKind
from durable_rpc.telemetry._common import SCOPE
from durable_rpc.telemetry._counting import LocalCounter
from durable_rpc.telemetry._metrics import NAMESPACE, TASK_KIND, TASK_QUEUE, EngineMetrics

log = logging.getLogger(__name__)

#: How often the gauges' counts are read from the store while metrics are exported: a
#: scrape reads the last counts, so it never costs a query (and a scrape storm cannot
#: load the store).
GAUGE_REFRESH_S = 5.0


class ServerMetrics(EngineMetrics):
    """EngineMetrics plus the server's own instruments:

    - ``durable_rpc.long_polls_waiting`` up-down counter {namespace, task_queue, task_kind}:
      polls parked waiting for a task (``task_kind`` also ``query``).
    - ``durable_rpc.waiting_tasks`` gauge {task_kind}: durable waits pending: ``timer``,
      ``activity`` (retry backoffs), ``workflow`` (workflow-task backoffs).
    - ``durable_rpc.activity_leases_expired`` counter: activity attempts whose lease ran
      out with no outcome (``process_due``): their worker died, stalled or was cut off,
      which its own ``lease_losses`` never reports.
    - ``durable_rpc.definition_unavailable_runs`` gauge {namespace, task_queue}: runs with
      a claimable workflow task whose definition no live worker of the queue registers.
    - ``durable_rpc.budget_reservations_waiting`` gauge {namespace, budget}: reservations
      (``workflow.reserve()``) waiting for a budget's units: deferred, not failed.
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        super().__init__(meter_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        # Counted in-process and observed at collection: a poll parks and wakes on the
        # hot path, where the SDK's synchronous add would cost ~20 us each way.
        self._long_polls: dict[tuple[str, str, str], int] = {}
        meter.create_observable_up_down_counter(
            "durable_rpc.long_polls_waiting",
            callbacks=[self._observe_polls],
            unit="{poll}",
            description="Long polls waiting for a task",
        )
        self._counts: MetricCounts | None = None
        self._unavailable_seen: set[tuple[str, str]] = set()
        meter.create_observable_gauge(
            "durable_rpc.waiting_tasks",
            callbacks=[self._observe_waiting],
            unit="{task}",
            description="Durable waits pending: timers and retry backoffs",
        )
        meter.create_observable_gauge(
            "durable_rpc.definition_unavailable_runs",
            callbacks=[self._observe_unavailable],
            unit="{run}",
            description="Runs ready for a workflow task no live worker can run",
        )
        self._budgets_seen: set[tuple[str, str]] = set()
        meter.create_observable_gauge(
            "durable_rpc.budget_reservations_waiting",
            callbacks=[self._observe_budgets],
            unit="{reservation}",
            description="Budget reservations waiting for units",
        )
        self._refresher: asyncio.Task[None] | None = None
        self._leases_expired = LocalCounter(
            meter,
            "durable_rpc.activity_leases_expired",
            "{lease}",
            "Activity attempts whose lease expired with no outcome",
        )

    def record_activity_leases_expired(self, count: int) -> None:
        self._leases_expired.add((), count)

    def poll_waiting(self, namespace: str, task_queue: str, kind: TaskKind, delta: int) -> None:
        key = (namespace, task_queue, kind)
        self._long_polls[key] = self._long_polls.get(key, 0) + delta

    def _observe_polls(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(n, {NAMESPACE: ns, TASK_QUEUE: queue, TASK_KIND: kind})
            for (ns, queue, kind), n in list(self._long_polls.items())
        ]

    # -- gauges ---------------------------------------------------------------------------

    def start_refreshing(self, store: Store, interval_s: float = GAUGE_REFRESH_S) -> None:
        """Read the gauges' counts now and every ``interval_s`` until :meth:`stop`."""
        self._refresher = asyncio.ensure_future(self._refresh(store, interval_s))

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        await stop_task(self._refresher, timeout)
        self._refresher = None

    async def _refresh(self, store: Store, interval_s: float) -> None:
        while True:
            try:
                self._counts = await store.metric_counts()
            except Exception as error:  # the store's outage shows in health; keep old counts
                log.debug("metric counts not read: %s", error)
            await asyncio.sleep(interval_s)

    def _observe_waiting(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._counts
        if counts is None:
            return []
        # Every kind, zeros included: a series that vanishes reads as "no data".
        return [
            Observation(counts.waiting.get(kind, 0), {TASK_KIND: kind})
            for kind in ("timer", "activity", "workflow")
        ]

    def _observe_budgets(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._counts
        if counts is None:
            return []
        # A budget once reported stays, at 0 when nothing waits (as the queues below).
        self._budgets_seen.update(counts.budget_waiting)
        return [
            Observation(counts.budget_waiting.get(key, 0), {NAMESPACE: key[0], "budget": key[1]})
            for key in sorted(self._budgets_seen)
        ]

    def _observe_unavailable(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._counts
        if counts is None:
            return []
        # A queue once reported stays, at 0 when resolved (a vanished series reads as
        # "no data", not as "fixed").
        self._unavailable_seen.update(counts.definition_unavailable)
        return [
            Observation(
                counts.definition_unavailable.get(key, 0),
                {NAMESPACE: key[0], TASK_QUEUE: key[1]},
            )
            for key in self._unavailable_seen
        ]
