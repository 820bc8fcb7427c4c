"""Budgets through a real server process (SQLite) and real worker processes
(tests/e2e/budget_app.py), configured with the CLI: two runs whose parallel branches
reserve from a budget that fits one run at a time never exceed it (measured from the
activities themselves) and both finish; a waiting reservation survives a worker and a
server restart; a run closed while holding hands its units to the waiter."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.errors import BudgetInUseError, InvalidArgumentError
from durable_rpc.v1 import admin_service_pb2 as pb
from tests.cli_process import run_cli_async
from tests.e2e.budget_app import BUDGET, Reserving
from tests.e2e.conftest import ROOT, ServerProcess, eventually

pytestmark = pytest.mark.timeout(180)

QUEUE = "budgets"
CAPACITY = 3000
AMOUNT = 2000  # two runs never fit at once


class BudgetWorker:
    """``tests.e2e.budget_app`` as a worker process."""

    def __init__(self, address: str, log: Path, tmp_path: Path) -> None:
        out = tmp_path / f"worker-{len(list(tmp_path.glob('worker-*.log')))}.log"
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "DURABLE_RPC_TEST_LOG": str(log)}
        with out.open("wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.budget_app", address, QUEUE],
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "executions.log"
    path.touch()
    return path


@pytest.fixture
def workers(server: ServerProcess, log: Path, tmp_path: Path) -> Iterator[list[BudgetWorker]]:
    started = [BudgetWorker(server.address, log, tmp_path)]
    yield started
    for worker in started:
        worker.stop()


def peak_units(log: Path) -> tuple[int, int]:
    """(the most units spent at once, how many spends ran) from the execution log."""
    in_use = peak = ran = 0
    for line in log.read_text().splitlines():
        event, _, units = line.split(" ")[0].rpartition(":")
        if event.startswith("spend-start:"):
            in_use += int(units)
            ran += 1
            peak = max(peak, in_use)
        elif event.startswith("spend-end:"):
            in_use -= int(units)
    return peak, ran


async def set_budget(server: ServerProcess, capacity: int) -> None:
    reply = await run_cli_async(
        "namespace",
        "budget",
        "set",
        BUDGET,
        "--capacity",
        str(capacity),
        "--json",
        address=server.address,
    )
    assert json.loads(reply.stdout)["budget"]["capacity"] == str(capacity)


async def listed(client: Client) -> pb.Budget:
    reply: pb.ListBudgetsResponse = await client.call(
        client.admin_service.ListBudgets, pb.ListBudgetsRequest()
    )
    (budget,) = reply.budgets
    return budget


async def test_a_budget_shared_by_two_runs_parallel_branches_is_never_exceeded(
    server: ServerProcess, client: Client, workers: list[BudgetWorker], log: Path
) -> None:
    await set_budget(server, CAPACITY)
    handles = [
        await client.start_workflow(
            Reserving.run, f"r{i}", AMOUNT, 4, 0.3, False, id=f"run-{i}", task_queue=QUEUE
        )
        for i in range(2)
    ]
    assert [await h.result(timeout=120) for h in handles] == [AMOUNT, AMOUNT]
    peak, ran = peak_units(log)
    assert ran == 8
    # One run's 500-unit branches at a time, never the other's: at most its 2000 units
    # (both runs at once would reach 4000, past the capacity of 3000).
    assert 0 < peak <= AMOUNT
    budget = await listed(client)
    assert (budget.capacity, budget.held, budget.waiting) == (CAPACITY, 0, 0)
    out = await run_cli_async("namespace", "budget", "list", address=server.address)
    assert BUDGET in out.stdout and str(CAPACITY) in out.stdout


async def test_a_waiting_reservation_survives_worker_and_server_restarts(
    server: ServerProcess,
    client: Client,
    workers: list[BudgetWorker],
    log: Path,
    tmp_path: Path,
) -> None:
    await set_budget(server, CAPACITY)
    holder = await client.start_workflow(
        Reserving.run, "holder", AMOUNT, 2, 0.1, True, id="holder", task_queue=QUEUE
    )
    await eventually(lambda: holder.query(Reserving.is_holding), what="the holder to hold")
    waiter = await client.start_workflow(
        Reserving.run, "waiter", AMOUNT, 2, 0.1, False, id="waiter", task_queue=QUEUE
    )

    async def waiting() -> bool:
        return (await listed(client)).waiting == 1

    await eventually(waiting, what="the waiter to wait")
    described = await waiter.describe()
    assert described.stuck_reason == (
        f"Waiting for budget {BUDGET} ({AMOUNT} of {CAPACITY}; {AMOUNT} held)."
    )
    # Nothing holds the wait but the database: the worker and the server go down.
    workers[0].kill()
    server.kill()
    await asyncio.get_running_loop().run_in_executor(None, server.start)
    workers.append(BudgetWorker(server.address, log, tmp_path))
    assert (await listed(client)).waiting == 1
    await holder.signal(Reserving.release)
    assert await holder.result(timeout=60) == AMOUNT
    assert await waiter.result(timeout=60) == AMOUNT
    peak, ran = peak_units(log)
    assert ran == 4 and peak <= AMOUNT


async def test_a_run_closed_while_holding_releases_to_the_waiter(
    server: ServerProcess, client: Client, workers: list[BudgetWorker], log: Path
) -> None:
    await set_budget(server, CAPACITY)
    holder = await client.start_workflow(
        Reserving.run, "holder", AMOUNT, 2, 0.1, True, id="holder", task_queue=QUEUE
    )
    await eventually(lambda: holder.query(Reserving.is_holding), what="the holder to hold")
    waiter = await client.start_workflow(
        Reserving.run, "waiter", AMOUNT, 2, 0.1, False, id="waiter", task_queue=QUEUE
    )

    async def waiting() -> bool:
        return (await listed(client)).waiting == 1

    await eventually(waiting, what="the waiter to wait")
    with pytest.raises(BudgetInUseError):
        await client.call(client.admin_service.RemoveBudget, pb.RemoveBudgetRequest(name=BUDGET))
    await holder.terminate("no longer needed")
    assert await waiter.result(timeout=60) == AMOUNT
    budget = await listed(client)
    assert (budget.held, budget.waiting) == (0, 0)
    removed = await run_cli_async("namespace", "budget", "remove", BUDGET, address=server.address)
    assert "removed" in removed.stdout


async def test_bad_budget_input_is_a_clear_error(
    server: ServerProcess, client: Client, workers: list[BudgetWorker]
) -> None:
    with pytest.raises(InvalidArgumentError, match="capacity"):
        await client.call(
            client.admin_service.SetBudget, pb.SetBudgetRequest(name=BUDGET, capacity=0)
        )
    await set_budget(server, CAPACITY)
    # More than the capacity can ever hold: the run's reserve raises, it never waits.
    too_big = await client.start_workflow(
        Reserving.run, "big", CAPACITY + 1, 1, 0.1, False, id="too-big", task_queue=QUEUE
    )
    with pytest.raises(Exception, match="BUDGET_AMOUNT_EXCEEDS_CAPACITY"):
        await too_big.result(timeout=60)


async def test_a_refill_rate_is_set_and_shown_through_the_cli_and_the_api(
    server: ServerProcess, client: Client
) -> None:
    reply = await run_cli_async(
        "namespace",
        "budget",
        "set",
        BUDGET,
        "--capacity",
        "5000",
        "--refill",
        "1000/min",
        "--json",
        address=server.address,
    )
    shown = json.loads(reply.stdout)["budget"]
    assert (shown["refillUnits"], shown["refillPeriodMs"]) == ("1000", "60000")
    table = await run_cli_async("namespace", "budget", "list", address=server.address)
    assert "1000/min" in table.stdout, table.stdout
    assert (await listed(client)).refill_units == 1000
    bad = await run_cli_async(
        "namespace",
        "budget",
        "set",
        BUDGET,
        "--capacity",
        "10",
        "--refill",
        "5/fortnight",
        address=server.address,
    )
    assert bad.returncode == 2 and "5/fortnight" in bad.stderr, bad.stderr
    with pytest.raises(InvalidArgumentError, match="refill must be"):
        await client.call(
            client.admin_service.SetBudget,
            pb.SetBudgetRequest(name=BUDGET, capacity=10, refill_units=5),
        )
