"""Priority and fairness through a real server process (SQLite) and a real worker process
(tests/e2e/priority_app.py, one task at a time): with a backlog of priority-5 runs
queued, a priority-1 run's workflow task and then its activity are the next ones the
worker is handed; describe and the CLI show the run's priority and fairness key; a
priority out of range is refused with a stable reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.errors import InvalidFairnessKeyError, InvalidPriorityError
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ServerProcess, WorkerProcess, eventually
from tests.e2e.priority_app import Marked, MarkedFanout

pytestmark = pytest.mark.timeout(180)

QUEUE = "prio"
BACKLOG = 300


def marks(log: Path) -> list[str]:
    return [
        line.split()[0].removeprefix("mark:")
        for line in log.read_text().splitlines()
        if line.startswith("mark:")
    ]


async def test_a_priority_1_run_is_taken_before_a_priority_5_backlog(
    server: ServerProcess,
    client: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "executions.log"
    log.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(log))
    # The backlog first, with no worker: BACKLOG workflow tasks queued at priority 5.
    for i in range(BACKLOG):
        await client.start_workflow(
            Marked.run, f"batch-{i}", id=f"batch-{i}", task_queue=QUEUE, priority=5
        )
    urgent = await client.start_workflow(
        Marked.run, "urgent", id="urgent", task_queue=QUEUE, priority=1, fairness_key="tenant-1"
    )
    described_queue = await run_cli_async(
        "task-queue", "describe", QUEUE, "--json", address=server.address
    )
    [workflow_backlog] = [
        b for b in json.loads(described_queue.stdout)["backlog"] if b["kind"] == "workflow"
    ]
    assert workflow_backlog["queuedByPriority"] == {"1": "1", "5": str(BACKLOG)}
    worker = WorkerProcess(server.address, QUEUE, tmp_path, module="tests.e2e.priority_app")
    try:
        assert await urgent.result(timeout=60) == "urgent"
        # The worker takes one task at a time: the urgent run was decided first and its
        # activity (priority 1, the run's) ran before any of the backlog's.
        await eventually(lambda: len(marks(log)) >= 3, what="a few activities ran")
        assert marks(log)[0] == "urgent", marks(log)[:5]
    finally:
        worker.stop()

    described = await urgent.describe()
    assert (described.priority, described.fairness_key) == (1, "tenant-1")
    shown = await run_cli_async("workflow", "describe", "urgent", "--json", address=server.address)
    data = json.loads(shown.stdout)
    assert (data["priority"], data["fairness_key"]) == (1, "tenant-1")
    batch = await client.get_handle("batch-0").describe()
    assert (batch.priority, batch.fairness_key) == (5, "")


async def test_an_activitys_own_priority_orders_its_claim(
    server: ServerProcess,
    client: Client,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "executions.log"
    log.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(log))
    worker = WorkerProcess(server.address, QUEUE, tmp_path, module="tests.e2e.priority_app")
    try:
        # Few: the one-cycle worker alternates long polls, and a workflow poll that finds
        # nothing (each completion carries its decision inline) waits out its timeout.
        handle = await client.start_workflow(MarkedFanout.run, 6, id="fanout", task_queue=QUEUE)
        assert len(await handle.result(timeout=120)) == 7
    finally:
        worker.stop()
    order = marks(log)
    # The decision's first activity may be claimed eagerly (nothing more urgent was queued
    # yet); every other claim takes the priority-1 activity before the priority-5 ones,
    # which the run's own priority (3) would have put last.
    assert order.index("urgent") <= 1, order


async def test_bad_priority_and_fairness_key_are_refused(
    server: ServerProcess, client: Client
) -> None:
    for bad in (0, 6):
        with pytest.raises(InvalidPriorityError, match="priority must be 1") as raised:
            await client.start_workflow(
                Marked.run, "x", id=f"bad-{bad}", task_queue=QUEUE, priority=bad
            )
        assert raised.value.reason == "INVALID_PRIORITY"
    with pytest.raises(InvalidFairnessKeyError, match="at most 128") as key_error:
        await client.start_workflow(
            Marked.run, "x", id="bad-key", task_queue=QUEUE, fairness_key="k" * 129
        )
    assert key_error.value.reason == "INVALID_FAIRNESS_KEY"
    started = await run_cli_async(
        "workflow",
        "start",
        "Marked",
        "--id",
        "cli",
        "--task-queue",
        QUEUE,
        "--input",
        '["cli"]',
        "--priority",
        "2",
        "--json",
        address=server.address,
    )
    assert json.loads(started.stdout)["workflow_id"] == "cli"
    assert (await client.get_handle("cli").describe()).priority == 2
    refused = await run_cli_async(
        "workflow",
        "start",
        "Marked",
        "--id",
        "cli-bad",
        "--task-queue",
        QUEUE,
        "--priority",
        "9",
        address=server.address,
    )
    assert refused.returncode != 0 and "INVALID_PRIORITY" in refused.stderr + refused.stdout
