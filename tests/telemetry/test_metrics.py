"""EngineMetrics, read back through an InMemoryMetricReader."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from durable_rpc.telemetry import EngineMetrics


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def engine_metrics(reader: InMemoryMetricReader) -> EngineMetrics:
    return EngineMetrics(MeterProvider(metric_readers=[reader]))


def collect(reader: InMemoryMetricReader) -> dict[str, dict[frozenset[Any], Any]]:
    """{metric name: {frozenset(label items): data point}}."""
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, dict[frozenset[Any], Any]] = {}
    for resource_metrics in data.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            assert scope_metrics.scope.name == "durable_rpc"
            for metric in scope_metrics.metrics:
                points = out.setdefault(metric.name, {})
                for point in metric.data.data_points:
                    points[frozenset((point.attributes or {}).items())] = point
    return out


def labels(**kw: str) -> frozenset[Any]:
    return frozenset(kw.items())


def test_every_instrument_records_with_bounded_labels(
    engine_metrics: EngineMetrics, reader: InMemoryMetricReader
) -> None:
    m = engine_metrics
    m.record_lease_lost("default", "workflow")
    m.record_lease_lost("default", "workflow")
    m.record_lease_lost("billing", "activity")
    m.record_task_queue_delay("default", "activity", 12.5)
    m.record_task_queue_delay("default", "activity", 7.5)
    m.record_execution_duration("default", "workflow", "completed", 30.0)
    m.record_execution_duration("default", "activity", "failed", 5.0)
    m.record_task_failure("default", "activity")
    m.record_task_failure("default", "activity", "timed_out")
    m.record_activity_retry("default")
    m.record_activity_retry("default")
    m.record_activity_retry("default")
    m.record_replayed_events("default", 40)
    m.record_replayed_events("default", 2)

    got = collect(reader)
    assert set(got) == {
        "durable_rpc.lease_lost",
        "durable_rpc.task_queue_delay_ms",
        "durable_rpc.execution_duration_ms",
        "durable_rpc.task_failures",
        "durable_rpc.activity_retries",
        "durable_rpc.workflow_tasks_replayed_events",
    }
    lease = got["durable_rpc.lease_lost"]
    assert lease[labels(namespace="default", task_kind="workflow")].value == 2
    assert lease[labels(namespace="billing", task_kind="activity")].value == 1

    delay = got["durable_rpc.task_queue_delay_ms"][
        labels(namespace="default", task_kind="activity")
    ]
    assert (delay.count, delay.sum, delay.min, delay.max) == (2, 20.0, 7.5, 12.5)

    duration = got["durable_rpc.execution_duration_ms"]
    done = duration[labels(namespace="default", task_kind="workflow", outcome="completed")]
    assert (done.count, done.sum) == (1, 30.0)
    failed = duration[labels(namespace="default", task_kind="activity", outcome="failed")]
    assert (failed.count, failed.sum) == (1, 5.0)

    failures = got["durable_rpc.task_failures"]
    assert failures[labels(namespace="default", task_kind="activity", outcome="failed")].value == 1
    timed_out = labels(namespace="default", task_kind="activity", outcome="timed_out")
    assert failures[timed_out].value == 1

    assert got["durable_rpc.activity_retries"][labels(namespace="default")].value == 3
    replayed = got["durable_rpc.workflow_tasks_replayed_events"][labels(namespace="default")]
    assert (replayed.count, replayed.sum) == (2, 42)


def test_unexpected_label_values_collapse_and_negatives_clamp(
    engine_metrics: EngineMetrics, reader: InMemoryMetricReader
) -> None:
    engine_metrics.record_execution_duration("default", "wf-123", "weird", 1.0)  # type: ignore[arg-type]
    engine_metrics.record_task_queue_delay("default", "workflow", -3.0)  # clock skew

    got = collect(reader)
    [key] = got["durable_rpc.execution_duration_ms"]
    assert key == labels(namespace="default", task_kind="other", outcome="other")
    delay = got["durable_rpc.task_queue_delay_ms"][
        labels(namespace="default", task_kind="workflow")
    ]
    assert (delay.count, delay.sum) == (1, 0.0)


def test_default_meter_provider_is_a_no_op() -> None:
    metrics = EngineMetrics()  # the global provider: nothing configured in tests
    metrics.record_lease_lost("default", "workflow")
    metrics.record_execution_duration("default", "activity", "completed", 1.0)
