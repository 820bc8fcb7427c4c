"""Engine metrics, with bounded labels only (namespace, task kind, outcome)."""

from __future__ import annotations

from typing import Literal, get_args

from opentelemetry import metrics
from opentelemetry.util.types import Attributes

from durable_rpc.telemetry._common import SCOPE

TaskKind = Literal["workflow", "activity"]
Outcome = Literal["completed", "failed", "timed_out", "cancelled", "lease_lost"]

_TASK_KINDS: frozenset[str] = frozenset(get_args(TaskKind))
_OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))
_OTHER = "other"  # where an unexpected value lands, so a bug cannot blow up cardinality

NAMESPACE = "namespace"
TASK_KIND = "task_kind"
OUTCOME = "outcome"


class EngineMetrics:
    """The engine's OTel instruments and one method to record each.

    Labels are only ``namespace`` (a configured namespace, never a workflow or run id),
    ``task_kind`` (``workflow`` | ``activity``) and ``outcome`` (``completed`` | ``failed`` |
    ``timed_out`` | ``cancelled`` | ``lease_lost``); any other kind or outcome is recorded as
    ``other``. With no meter provider the global one is used, which is a no-op until an SDK
    ``MeterProvider`` is set.

    Instruments (all prefixed ``durable_rpc.``):

    - ``lease_lost`` counter {namespace, task_kind}: a task's lease was lost or fenced out.
    - ``task_queue_delay_ms`` histogram {namespace, task_kind}: scheduled → handed to a worker.
    - ``execution_duration_ms`` histogram {namespace, task_kind, outcome}: one real execution.
    - ``task_failures`` counter {namespace, task_kind, outcome}: failed/timed-out executions.
    - ``activity_retries`` counter {namespace}: an activity attempt scheduled as a retry.
    - ``workflow_tasks_replayed_events`` histogram {namespace}: history events replayed per
      workflow task (its sum is the total replayed).
    """

    def __init__(self, meter_provider: metrics.MeterProvider | None = None) -> None:
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self._lease_lost = meter.create_counter(
            "durable_rpc.lease_lost", unit="{lease}", description="Task leases lost or fenced out"
        )
        self._task_queue_delay = meter.create_histogram(
            "durable_rpc.task_queue_delay_ms",
            unit="ms",
            description="Time from a task being scheduled to a worker receiving it",
        )
        self._execution_duration = meter.create_histogram(
            "durable_rpc.execution_duration_ms",
            unit="ms",
            description="Duration of one real workflow-task or activity execution",
        )
        self._task_failures = meter.create_counter(
            "durable_rpc.task_failures", unit="{task}", description="Failed task executions"
        )
        self._activity_retries = meter.create_counter(
            "durable_rpc.activity_retries", unit="{retry}", description="Activity retry attempts"
        )
        self._replayed_events = meter.create_histogram(
            "durable_rpc.workflow_tasks_replayed_events",
            unit="{event}",
            description="History events replayed to run one workflow task",
        )

    def record_lease_lost(self, namespace: str, task_kind: TaskKind) -> None:
        self._lease_lost.add(1, _labels(namespace, task_kind))

    def record_task_queue_delay(self, namespace: str, task_kind: TaskKind, delay_ms: float) -> None:
        # Clocks of different hosts may disagree a little; a delay is never negative.
        self._task_queue_delay.record(max(0.0, delay_ms), _labels(namespace, task_kind))

    def record_execution_duration(
        self, namespace: str, task_kind: TaskKind, outcome: Outcome, duration_ms: float
    ) -> None:
        self._execution_duration.record(
            max(0.0, duration_ms), _labels(namespace, task_kind, outcome)
        )

    def record_task_failure(
        self, namespace: str, task_kind: TaskKind, outcome: Outcome = "failed"
    ) -> None:
        self._task_failures.add(1, _labels(namespace, task_kind, outcome))

    def record_activity_retry(self, namespace: str) -> None:
        self._activity_retries.add(1, {NAMESPACE: namespace})

    def record_replayed_events(self, namespace: str, events: int) -> None:
        self._replayed_events.record(max(0, events), {NAMESPACE: namespace})


def _labels(namespace: str, task_kind: str, outcome: str | None = None) -> Attributes:
    labels = {NAMESPACE: namespace, TASK_KIND: task_kind if task_kind in _TASK_KINDS else _OTHER}
    if outcome is not None:
        labels[OUTCOME] = outcome if outcome in _OUTCOMES else _OTHER
    return labels
