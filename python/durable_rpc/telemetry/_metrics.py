"""Engine metrics, with bounded labels only (namespace, task queue, task kind, outcome)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol, get_args

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.util.types import Attributes

from durable_rpc.telemetry._common import SCOPE
from durable_rpc.telemetry._counting import Labels, LocalCounter

TaskKind = Literal["workflow", "activity"]
Outcome = Literal["completed", "failed", "timed_out", "cancelled", "lease_lost"]

_TASK_KINDS: frozenset[str] = frozenset(get_args(TaskKind))
_OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))
OTHER = "other"  # where an unexpected value lands, so a bug cannot blow up cardinality

NAMESPACE = "namespace"
TASK_QUEUE = "task_queue"
TASK_KIND = "task_kind"
OUTCOME = "outcome"

#: Histogram buckets of durations in seconds: a store commit (~0.1 ms) up to a long
#: activity (5 min). OTel's default buckets are meant for milliseconds.
SECONDS_BUCKETS: Sequence[float] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
#: Buckets of counts (events replayed, operations in a batch, attempts).
COUNT_BUCKETS: Sequence[float] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000, 10000)


class StickySnapshot(Protocol):
    """What the sticky cache gauges read (``StickyCacheMetrics``)."""

    @property
    def evictions(self) -> int: ...
    @property
    def entries(self) -> int: ...
    @property
    def history_bytes(self) -> int: ...


def kind_label(task_kind: str) -> str:
    return task_kind if task_kind in _TASK_KINDS else OTHER


def outcome_label(outcome: str) -> str:
    return outcome if outcome in _OUTCOMES else OTHER


class EngineMetrics:
    """The task-level OTel instruments the server and the worker record, one method each.

    Labels are only ``namespace`` (a configured namespace, never a workflow or run id),
    ``task_queue``, ``task_kind`` (``workflow`` | ``activity``) and ``outcome``
    (``completed`` | ``failed`` | ``timed_out`` | ``cancelled`` | ``lease_lost``); any other
    kind or outcome is recorded as ``other``. With no meter provider the global one is
    used, which is a no-op until an SDK ``MeterProvider`` is set. Counters are
    :class:`LocalCounter` (observable: totals reported at collection), so a count on the
    hot path costs a dict increment; histograms are the SDK's.

    Instruments (OTel names; the Prometheus exporter turns ``.`` into ``_``, adds
    ``_seconds`` to durations and ``_total`` to counters; docs/operations.md, "Metrics"):

    - ``durable_rpc.task_queue_delay`` histogram, s {namespace, task_queue, task_kind}:
      a task claimable (scheduled, backoff over, lease expired) until handed to a worker
      (server).
    - ``durable_rpc.lease_losses`` counter {namespace, task_queue, task_kind}: a task's
      lease lost or fenced out under the worker holding it (worker).
    - ``durable_rpc.execution_duration`` histogram, s {namespace, task_queue, task_kind,
      outcome}: one real workflow-task or activity-attempt execution (worker).
    - ``durable_rpc.task_failures`` counter {namespace, task_queue, task_kind, outcome}:
      executions that failed, timed out or were cancelled (worker).
    - ``durable_rpc.activity_retries`` counter {namespace}: a failed attempt the server
      scheduled a retry of (server).
    - ``durable_rpc.workflow_task_retries`` counter {namespace, task_queue}: workflow tasks
      handed out again after a failed or timed-out attempt (server).
    - ``durable_rpc.replayed_events`` counter {namespace, task_queue}: history events
      workflow tasks applied to the replay machine (the whole history when cold, the new
      events when continuing a live instance, the kept history for an inline decision)
      (worker); with ``execution_duration``'s workflow count, the mean per task.
    - ``durable_rpc.sticky_cache`` counter {namespace, task_queue, result}: workflow tasks
      that continued a live instance (``hit``), found none (``miss``), or found one the
      history did not continue (``diverged``) (worker).
    - ``durable_rpc.sticky_cache_evictions`` counter {namespace, task_queue}: live
      instances a sticky cache bound removed (LRU past the entry or byte bound, too big
      to keep, expired) (worker).
    - ``durable_rpc.sticky_cache_entries`` gauge {namespace, task_queue}: live instances
      kept now, and ``durable_rpc.sticky_cache_history_bytes`` gauge, By: the encoded
      history they consumed (worker).
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self._task_queue_delay = meter.create_histogram(
            "durable_rpc.task_queue_delay",
            unit="s",
            description="Time from a task becoming claimable to a worker receiving it",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._execution_duration = meter.create_histogram(
            "durable_rpc.execution_duration",
            unit="s",
            description="Duration of one real workflow-task or activity-attempt execution",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self._lease_losses = LocalCounter(
            meter,
            "durable_rpc.lease_losses",
            "{lease}",
            "Task leases lost or fenced out under their worker",
        )
        self._task_failures = LocalCounter(
            meter, "durable_rpc.task_failures", "{task}", "Failed task executions"
        )
        self._activity_retries = LocalCounter(
            meter,
            "durable_rpc.activity_retries",
            "{retry}",
            "Failed activity attempts scheduled for a retry",
        )
        self._workflow_task_retries = LocalCounter(
            meter,
            "durable_rpc.workflow_task_retries",
            "{task}",
            "Workflow tasks handed out again after a failed or timed-out attempt",
        )
        self._replayed_events = LocalCounter(
            meter,
            "durable_rpc.replayed_events",
            "{event}",
            "History events applied to the replay machine by workflow tasks",
        )
        self._sticky_cache = LocalCounter(
            meter,
            "durable_rpc.sticky_cache",
            "{task}",
            "Workflow tasks by whether they continued a live instance",
        )
        # The workers' live-instance caches, read when metrics are collected (nothing
        # is recorded on the task path for them).
        self._sticky_caches: list[tuple[Attributes, Callable[[], StickySnapshot]]] = []
        meter.create_observable_counter(
            "durable_rpc.sticky_cache_evictions",
            callbacks=[self._observe_sticky("evictions")],
            unit="{entry}",
            description="Live workflow instances removed by a sticky cache bound",
        )
        meter.create_observable_gauge(
            "durable_rpc.sticky_cache_entries",
            callbacks=[self._observe_sticky("entries")],
            unit="{entry}",
            description="Live workflow instances a worker keeps",
        )
        meter.create_observable_gauge(
            "durable_rpc.sticky_cache_history_bytes",
            callbacks=[self._observe_sticky("history_bytes")],
            unit="By",
            description="Encoded history the kept live workflow instances consumed",
        )
        # Label dicts of the histograms, built once per label set (hot path).
        self._attributes: dict[tuple[str, ...], Attributes] = {}

    def observe_sticky_cache(
        self, namespace: str, task_queue: str, snapshot: Callable[[], StickySnapshot]
    ) -> None:
        """Report a worker's live-instance cache (evictions, entries, history bytes) at
        each collection; ``snapshot`` runs on the exporter's thread and only reads."""
        labels: Attributes = {NAMESPACE: namespace, TASK_QUEUE: task_queue}
        self._sticky_caches.append((labels, snapshot))

    def _observe_sticky(
        self, field: Literal["evictions", "entries", "history_bytes"]
    ) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(getattr(snapshot(), field), labels)
                for labels, snapshot in list(self._sticky_caches)
            ]

        return observe

    def _histogram_labels(self, *key: str) -> Attributes:
        labels = self._attributes.get(key)
        if labels is None:
            labels = self._attributes[key] = dict(_labels(*key))
        return labels

    def record_task_queue_delay(
        self, namespace: str, task_queue: str, task_kind: TaskKind, delay_s: float
    ) -> None:
        # Clocks of different hosts may disagree a little; a delay is never negative.
        self._task_queue_delay.record(
            max(0.0, delay_s), self._histogram_labels(namespace, task_queue, task_kind)
        )

    def record_lease_lost(self, namespace: str, task_queue: str, task_kind: TaskKind) -> None:
        self._lease_losses.add(_labels(namespace, task_queue, task_kind))

    def record_execution(
        self,
        namespace: str,
        task_queue: str,
        task_kind: TaskKind,
        outcome: Outcome,
        duration_s: float,
    ) -> None:
        """One real execution: its duration, and a failure when it did not complete."""
        self._execution_duration.record(
            max(0.0, duration_s), self._histogram_labels(namespace, task_queue, task_kind, outcome)
        )
        if outcome in ("failed", "timed_out", "cancelled"):
            self._task_failures.add(_labels(namespace, task_queue, task_kind, outcome))
        elif outcome == "lease_lost":
            self._lease_losses.add(_labels(namespace, task_queue, task_kind))

    def record_activity_retry(self, namespace: str) -> None:
        self._activity_retries.add(((NAMESPACE, namespace),))

    def record_workflow_task_attempt(self, namespace: str, task_queue: str, attempt: int) -> None:
        if attempt > 1:
            self._workflow_task_retries.add(((NAMESPACE, namespace), (TASK_QUEUE, task_queue)))

    def record_replayed_events(self, namespace: str, task_queue: str, events: int) -> None:
        if events > 0:
            self._replayed_events.add(((NAMESPACE, namespace), (TASK_QUEUE, task_queue)), events)

    def record_sticky_cache(
        self, namespace: str, task_queue: str, result: Literal["hit", "miss", "diverged"]
    ) -> None:
        self._sticky_cache.add(
            ((NAMESPACE, namespace), (TASK_QUEUE, task_queue), ("result", result))
        )


def _labels(namespace: str, task_queue: str, task_kind: str, outcome: str | None = None) -> Labels:
    labels: Labels = (
        (NAMESPACE, namespace),
        (TASK_QUEUE, task_queue),
        (TASK_KIND, kind_label(task_kind)),
    )
    if outcome is not None:
        labels += ((OUTCOME, outcome_label(outcome)),)
    return labels
