"""Metrics after real runs: a server process serving Prometheus text at /metrics, and a
worker recording on its own SDK MeterProvider, over a real socket."""

from __future__ import annotations

import re
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from durable_rpc import Client, RetryPolicy, Worker, activity, workflow
from tests.cli_process import run_cli
from tests.e2e.apps import Sleeper
from tests.e2e.conftest import ServerProcess, eventually, free_port

QUEUE = "metered"
_attempts: dict[str, int] = {}


@activity.defn
async def greet(name: str) -> str:
    return f"Hello, {name}!"


@activity.defn
async def flaky_greet(name: str) -> str:
    # Fails its first attempt: one retry the server schedules, one failure the worker sees.
    _attempts[name] = _attempts.get(name, 0) + 1
    if _attempts[name] == 1:
        raise RuntimeError("transient failure")
    return f"Goodbye, {name}!"


@workflow.defn(name="Metered")
class Metered:
    @workflow.run
    async def run(self, name: str) -> str:
        hello = await workflow.execute_activity(
            greet, name, start_to_close_timeout=timedelta(seconds=10)
        )
        bye = await workflow.execute_activity(
            flaky_greet,
            name,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
        )
        return f"{hello} {bye}"


_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text: {sample name: [(labels, value)]}."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match is not None, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        out.setdefault(match["name"], []).append((labels, float(match["value"])))
    return out


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **want: str) -> float:
    """The sum of ``name``'s samples whose labels include ``want``."""
    return sum(v for labels, v in samples.get(name, []) if want.items() <= labels.items())


class MetricsServer(ServerProcess):
    def __init__(self, tmp_path: Path) -> None:
        self.metrics_port = free_port()
        super().__init__(
            tmp_path / "metrics.db",
            tmp_path / "server.log",
            "--metrics-listen",
            f"127.0.0.1:{self.metrics_port}",
        )

    def scrape(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            text: str = response.read().decode()
            return text


@pytest.fixture
def metrics_server(tmp_path: Path) -> Iterator[MetricsServer]:
    proc = MetricsServer(tmp_path)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
async def metered_client(metrics_server: MetricsServer) -> AsyncIterator[Client]:
    client = await Client.connect(metrics_server.address)
    yield client
    await client.close()


def worker_metrics(reader: InMemoryMetricReader) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    data = reader.get_metrics_data()
    assert data is not None
    out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    out.setdefault(metric.name, []).append((dict(point.attributes or {}), point))
    return out


async def test_a_real_run_is_recorded_by_the_server_and_the_worker(
    metrics_server: MetricsServer, metered_client: Client
) -> None:
    reader = InMemoryMetricReader()
    name = uuid.uuid4().hex[:8]
    async with Worker(
        metered_client,
        task_queue=QUEUE,
        workflows=[Metered, Sleeper],
        activities=[greet, flaky_greet],
        meter_provider=MeterProvider(metric_readers=[reader]),
    ):
        handle = await metered_client.start_workflow(
            Metered.run, name, id=f"metered-{name}", task_queue=QUEUE
        )
        assert await handle.result() == f"Hello, {name}! Goodbye, {name}!"
        # A durable timer pending for an hour, and a run no live worker can take.
        sleeping = await metered_client.start_workflow(
            "Sleeper", 3600.0, id=f"sleeper-{name}", task_queue=QUEUE
        )
        await metered_client.start_workflow("Nobody", id=f"nobody-{name}", task_queue=QUEUE)

        async def timer_pending() -> bool:
            return any(e.HasField("timer_started") for e in await sleeping.history())

        await eventually(timer_pending, what="the sleeper's timer")
        # The gauges are read from the store every few seconds, not per scrape.
        await eventually(
            lambda: (
                value(
                    parse(metrics_server.scrape()), "durable_rpc_waiting_tasks", task_kind="timer"
                )
                == 1
                and value(
                    parse(metrics_server.scrape()),
                    "durable_rpc_definition_unavailable_runs",
                    namespace="default",
                    task_queue=QUEUE,
                )
                == 1
            ),
            timeout=20,
            what="the gauges' refresh",
        )
        # The worker's polls park on the server between tasks.
        await eventually(
            lambda: (
                value(
                    parse(metrics_server.scrape()),
                    "durable_rpc_long_polls_waiting",
                    namespace="default",
                    task_queue=QUEUE,
                    task_kind="workflow",
                )
                >= 1
            ),
            what="a waiting workflow poll",
        )
    text = metrics_server.scrape()
    samples = parse(text)
    ns = {"namespace": "default", "task_queue": QUEUE}

    # RPCs by method and code.
    start = {"method": "durable_rpc.v1.WorkflowService/StartWorkflow", "code": "OK"}
    assert value(samples, "durable_rpc_rpc_duration_seconds_count", **start) == 3
    assert value(samples, "durable_rpc_rpc_duration_seconds_sum", **start) > 0
    assert (
        value(
            samples,
            "durable_rpc_rpc_duration_seconds_count",
            method="durable_rpc.v1.WorkerService/RegisterWorker",
            code="OK",
        )
        == 1
    )
    # Queue delay of every task handed out: the Metered run's workflow tasks and its three
    # activity attempts (greet, flaky_greet twice), at least.
    assert (
        value(samples, "durable_rpc_task_queue_delay_seconds_count", **ns, task_kind="activity")
        >= 3
    )
    assert (
        value(samples, "durable_rpc_task_queue_delay_seconds_count", **ns, task_kind="workflow")
        >= 2
    )
    # The failed attempt's retry.
    assert value(samples, "durable_rpc_activity_retries_total", namespace="default") == 1
    # No workflow task failed: none was handed out again.
    assert value(samples, "durable_rpc_workflow_task_retries_total", **ns) == 0
    # Store commits: every write went through the SQLite writer.
    committed = {"store": "sqlite", "outcome": "committed"}
    commits = value(samples, "durable_rpc_store_transaction_duration_seconds_count", **committed)
    assert commits >= 10
    assert value(samples, "durable_rpc_store_transactions_total", store="sqlite") == commits
    assert value(samples, "durable_rpc_store_operations_total", **committed) >= commits
    # Bounded labels: no workflow or run id anywhere.
    assert name not in text
    assert handle.run_id is None or handle.run_id not in text

    # The worker's own metrics, on its MeterProvider.
    got = worker_metrics(reader)
    durations = {
        (labels["task_kind"], labels["outcome"]): point.count
        for labels, point in got["durable_rpc.execution_duration"]
        if labels["task_queue"] == QUEUE
    }
    assert durations[("activity", "completed")] == 2
    assert durations[("activity", "failed")] == 1
    assert durations.get(("workflow", "completed"), 0) >= 1
    [(failure_labels, failure)] = got["durable_rpc.task_failures"]
    assert failure_labels == {
        "namespace": "default",
        "task_queue": QUEUE,
        "task_kind": "activity",
        "outcome": "failed",
    }
    assert failure.value == 1
    [(replayed_labels, replayed)] = got["durable_rpc.replayed_events"]
    assert replayed_labels == {"namespace": "default", "task_queue": QUEUE}
    assert replayed.value >= 4  # at least WorkflowStarted, then the first activity's events
    sticky = {labels["result"]: point.value for labels, point in got["durable_rpc.sticky_cache"]}
    assert sticky.get("miss", 0) >= 1  # short runs keep no live instance


@pytest.mark.parametrize("listen", ["9464", "localhost:", "host:99999"])
def test_a_malformed_metrics_address_is_refused_before_serving(listen: str) -> None:
    done = run_cli("server", "--db", "sqlite://:memory:", "--metrics-listen", listen)
    assert done.returncode == 2, done
    assert f"--metrics-listen must be HOST:PORT, got {listen!r}" in done.stderr
