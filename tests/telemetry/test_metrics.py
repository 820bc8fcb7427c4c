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
    m.record_lease_lost("default", "q", "workflow")
    m.record_lease_lost("default", "q", "workflow")
    m.record_lease_lost("billing", "q", "activity")
    m.record_task_queue_delay("default", "q", "activity", 0.0125)
    m.record_task_queue_delay("default", "q", "activity", 0.0075)
    m.record_execution("default", "q", "workflow", "completed", 0.030)
    m.record_execution("default", "q", "activity", "failed", 0.005)
    m.record_execution("default", "q", "activity", "lease_lost", 0.001)
    m.record_activity_retry("default")
    m.record_activity_retry("default")
    m.record_activity_retry("default")
    m.record_workflow_task_attempt("default", "q", 1)
    m.record_workflow_task_attempt("default", "q", 3)
    m.record_replayed_events("default", "q", 40)
    m.record_replayed_events("default", "q", 2)
    m.record_sticky_cache("default", "q", "hit")
    m.record_sticky_cache("default", "q", "miss")
    m.record_sticky_cache("default", "q", "miss")

    got = collect(reader)
    assert set(got) == {
        "durable_rpc.lease_losses",
        "durable_rpc.task_queue_delay",
        "durable_rpc.execution_duration",
        "durable_rpc.task_failures",
        "durable_rpc.activity_retries",
        "durable_rpc.workflow_task_retries",
        "durable_rpc.replayed_events",
        "durable_rpc.sticky_cache",
    }
    lease = got["durable_rpc.lease_losses"]
    # Two recorded directly, one by the execution that ended with its lease lost.
    assert lease[labels(namespace="default", task_queue="q", task_kind="workflow")].value == 2
    assert lease[labels(namespace="billing", task_queue="q", task_kind="activity")].value == 1
    assert lease[labels(namespace="default", task_queue="q", task_kind="activity")].value == 1

    delay = got["durable_rpc.task_queue_delay"][
        labels(namespace="default", task_queue="q", task_kind="activity")
    ]
    assert (delay.count, delay.min, delay.max) == (2, 0.0075, 0.0125)
    assert delay.sum == pytest.approx(0.02)

    duration = got["durable_rpc.execution_duration"]
    done = duration[
        labels(namespace="default", task_queue="q", task_kind="workflow", outcome="completed")
    ]
    assert (done.count, done.sum) == (1, 0.030)
    failed = labels(namespace="default", task_queue="q", task_kind="activity", outcome="failed")
    assert (duration[failed].count, duration[failed].sum) == (1, 0.005)

    # Only the failed execution is a failure (not the completed one, not the lost lease).
    assert {k: p.value for k, p in got["durable_rpc.task_failures"].items()} == {failed: 1}

    assert got["durable_rpc.activity_retries"][labels(namespace="default")].value == 3
    # A first attempt is no retry; the third attempt is.
    retries = got["durable_rpc.workflow_task_retries"]
    assert retries[labels(namespace="default", task_queue="q")].value == 1
    replayed = got["durable_rpc.replayed_events"][labels(namespace="default", task_queue="q")]
    assert replayed.value == 42
    sticky = got["durable_rpc.sticky_cache"]
    assert sticky[labels(namespace="default", task_queue="q", result="hit")].value == 1
    assert sticky[labels(namespace="default", task_queue="q", result="miss")].value == 2


def test_unexpected_label_values_collapse_and_negatives_clamp(
    engine_metrics: EngineMetrics, reader: InMemoryMetricReader
) -> None:
    engine_metrics.record_execution("default", "q", "wf-123", "weird", 1.0)  # type: ignore[arg-type]
    engine_metrics.record_task_queue_delay("default", "q", "workflow", -3.0)  # clock skew

    got = collect(reader)
    [key] = got["durable_rpc.execution_duration"]
    assert key == labels(namespace="default", task_queue="q", task_kind="other", outcome="other")
    delay = got["durable_rpc.task_queue_delay"][
        labels(namespace="default", task_queue="q", task_kind="workflow")
    ]
    assert (delay.count, delay.sum) == (1, 0.0)


def test_default_meter_provider_is_a_no_op() -> None:
    metrics = EngineMetrics()  # the global provider: nothing configured in tests
    metrics.record_lease_lost("default", "q", "workflow")
    metrics.record_execution("default", "q", "activity", "completed", 1.0)
