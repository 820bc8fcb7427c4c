"""Namespace admission through a real server process (SQLite), set with the CLI, with
real worker processes: tenant A floods 2,000 starts against a limit of 20 open runs
(queue); tenant B, another namespace on the same server, starts runs meanwhile. A's
runs are admitted at the limit (never more than 20 of its naps running at once, as the
activities themselves log it, and never more than 20 admitted open runs, as the store
counts them), all 2,000 complete, and B's latency stays within its bound: B waits for
none of A's 1,980 not-yet-admitted runs (they have no workflow task to claim)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.errors import AdmissionLimitError, ConcurrencyKeyLimitError
from durable_rpc.v1 import admin_service_pb2 as pb
from tests.cli_process import run_cli_async
from tests.e2e import apps
from tests.e2e.conftest import ServerProcess, WorkerProcess
from tests.e2e.test_queue_limits import max_running

pytestmark = pytest.mark.timeout(600)

FLOOD = 2_000
LIMIT = 20
NAP_S = 0.05
#: B's runs measured before the flood (idle) and during it.
B_IDLE_RUNS = 10
B_RUNS = 30
#: The bound on B's p95 latency (start to result) during the flood, in seconds: its idle
#: p95 times this factor, or B_FLOOR_S if that is more. B's run is one workflow task, one
#: 50 ms activity and a closing workflow task; with admission, A keeps only 20 runs in
#: flight on the shared server (its backlog is not claimable), so B competes with those
#: and with A's start RPCs for the one SQLite writer, not with 2,000 runs of work.
B_FACTOR = 10
B_FLOOR_S = 2.0


async def _b_latency(client: Client, tag: str) -> float:
    began = time.perf_counter()
    handle = await client.start_workflow(apps.Naps.run, 1, NAP_S, 10.0, id=tag, task_queue="b")
    assert len(await handle.result(timeout=120)) == 1
    return time.perf_counter() - began


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20)[-1]


async def _admission(client: Client) -> pb.NamespaceAdmission:
    reply: pb.GetNamespaceAdmissionResponse = await client.call(
        client.admin_service.GetNamespaceAdmission, pb.GetNamespaceAdmissionRequest()
    )
    return reply.admission


async def test_a_flooding_tenant_is_admitted_at_its_limit_and_the_other_keeps_its_latency(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await client.call(
        client.admin_service.CreateNamespace, pb.CreateNamespaceRequest(namespace="tenant-b")
    )
    set_policy = await run_cli_async(
        "namespace", "admission", "set", "--max-open-runs", str(LIMIT), "--json",
        address=server.address,
    )  # fmt: skip
    assert json.loads(set_policy.stdout)["admission"]["maxOpenRuns"] == LIMIT
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    log_a.touch()
    log_b.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(log_a))
    workers = [spawn_worker(server.address, "flood") for _ in range(3)]  # 24 slots > 20
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(log_b))
    workers.append(spawn_worker(server.address, "b", "--namespace", "tenant-b"))
    tenant_b = await Client.connect(server.address, namespace="tenant-b")
    try:
        await _b_latency(tenant_b, "warm-up")  # waits for B's worker to register
        idle = [await _b_latency(tenant_b, f"idle-{i}") for i in range(B_IDLE_RUNS)]

        gate = asyncio.Semaphore(32)

        async def flood_one(i: int) -> None:
            async with gate:
                await client.start_workflow(
                    apps.Naps.run, 1, NAP_S, 10.0, id=f"a-{i}", task_queue="flood"
                )

        flooding = asyncio.ensure_future(asyncio.gather(*(flood_one(i) for i in range(FLOOD))))
        peak_admitted = 0
        waited = 0

        async def watch() -> None:
            nonlocal peak_admitted, waited
            while True:
                admission = await _admission(client)
                peak_admitted = max(peak_admitted, admission.open_runs)
                waited = max(waited, admission.waiting_runs)
                if flooding.done() and admission.open_runs + admission.waiting_runs == 0:
                    return
                await asyncio.sleep(0.05)

        watcher = asyncio.ensure_future(watch())
        during = [await _b_latency(tenant_b, f"b-{i}") for i in range(B_RUNS)]
        await flooding
        await asyncio.wait_for(watcher, timeout=400)

        peak, ran = max_running(log_a)
        described = await client.get_handle(f"a-{FLOOD - 1}").describe()
        print(
            f"B latency p95 idle {_p95(idle) * 1000:.0f} ms, during the flood "
            f"{_p95(during) * 1000:.0f} ms (max {max(during) * 1000:.0f} ms); A peak naps "
            f"{peak}, peak admitted {peak_admitted}, most waiting {waited}"
        )
        assert ran == FLOOD  # every start ran (and once: one nap per run)
        assert peak <= LIMIT and peak_admitted <= LIMIT
        assert waited > LIMIT  # the flood did queue
        assert described.info.status == "completed"
        bound = max(B_FLOOR_S, B_FACTOR * _p95(idle))
        assert _p95(during) < bound, (during, idle)
        # Refuse instead of queue: a start over the limit gets ADMISSION_LIMIT.
        await run_cli_async(
            "namespace", "admission", "set", "--max-open-runs", "1", "--over-limit",
            "refuse", address=server.address,
        )  # fmt: skip
        await client.start_workflow(apps.Collector.run, id="held", task_queue="flood")
        with pytest.raises(AdmissionLimitError, match="limit 1 open runs reached"):
            await client.start_workflow(apps.Collector.run, id="refused", task_queue="flood")
        shown = await run_cli_async("namespace", "admission", "show", address=server.address)
        assert "refuse" in shown.stdout
        removed = await run_cli_async("namespace", "admission", "remove", address=server.address)
        assert "no admission policy" in removed.stdout
    finally:
        await tenant_b.close()
        for worker in workers:
            worker.stop()


async def test_a_concurrency_key_is_limited_through_the_api(
    server: ServerProcess, client: Client
) -> None:
    """start_workflow(..., concurrency_key=...) through the server: the namespace's
    per-key limit refuses a second open run of the key (CANCEL_NEWEST), not another key."""
    await run_cli_async(
        "namespace", "admission", "set", "--max-open-runs-per-key", "1", "--key-strategy",
        "cancel-newest", address=server.address,
    )  # fmt: skip
    shown = await run_cli_async(
        "namespace", "admission", "show", "--json", address=server.address
    )  # fmt: skip
    policy = json.loads(shown.stdout)["admission"]
    assert (policy["maxOpenRunsPerKey"], policy["keyStrategy"]) == (
        1,
        "CONCURRENCY_KEY_STRATEGY_CANCEL_NEWEST",
    )
    await client.start_workflow(
        apps.Collector.run, id="c42-1", task_queue="keys", concurrency_key="customer-42"
    )
    with pytest.raises(ConcurrencyKeyLimitError, match="concurrency key 'customer-42'") as no:
        await client.start_workflow(
            apps.Collector.run, id="c42-2", task_queue="keys", concurrency_key="customer-42"
        )
    assert no.value.reason == "CONCURRENCY_KEY_LIMIT"
    await client.start_workflow(
        apps.Collector.run, id="c7-1", task_queue="keys", concurrency_key="customer-7"
    )
    await client.get_handle("c42-1").terminate("done")
    await client.start_workflow(
        apps.Collector.run, id="c42-2", task_queue="keys", concurrency_key="customer-42"
    )
