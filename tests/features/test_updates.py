"""Workflow updates (@workflow.update, handle.execute_update / start_update) against a
real server and worker processes: validated, recorded once accepted, deduplicated by
update id, durable across a worker crash, and replayable offline."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from durable_rpc import (
    Client,
    UpdateRejectedError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    workflow,
)
from durable_rpc.testing import Replayer
from durable_rpc.v1 import history_pb2
from tests.e2e.conftest import ServerProcess, eventually, wait_for
from tests.e2e.test_operability import cli
from tests.features import apps
from tests.features.conftest import FeatureWorker, lines

pytestmark = pytest.mark.timeout(120)


def kinds(events: list[history_pb2.HistoryEvent]) -> list[str | None]:
    return [e.WhichOneof("attributes") for e in events]


def accepted_ids(events: list[history_pb2.HistoryEvent]) -> list[str]:
    return [e.update_accepted.update_id for e in events if e.HasField("update_accepted")]


async def settled_history(handle: WorkflowHandle) -> list[history_pb2.HistoryEvent]:
    """The history once two reads 300 ms apart agree (no workflow task in flight)."""
    previous = await handle.history()
    while True:
        await asyncio.sleep(0.3)
        current = await handle.history()
        if current == previous:
            return current
        previous = current


async def started(client: Client, queue: str, workflow_id: str) -> WorkflowHandle:
    handle = await client.start_workflow(apps.Ledger.run, id=workflow_id, task_queue=queue)

    async def first_task_done() -> bool:
        return "workflow_task_completed" in kinds(await handle.history())

    # The first workflow task ran: the run waits on its condition.
    await eventually(first_task_done, what="the first workflow task")
    return handle


async def test_accepted_update_completes_with_a_typed_result(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await started(client, queue, "upd-1")
    receipt = await handle.execute_update(apps.Ledger.deposit, 5, "first")
    assert receipt == apps.Receipt(5, "first")
    assert isinstance(receipt, apps.Receipt)
    # By name, and the handler sees the state the first update left.
    second = await handle.execute_update("deposit", 2, "second", result_type=apps.Receipt)
    assert second == apps.Receipt(7, "second")

    with pytest.raises(WorkflowUpdateFailedError) as failed:
        await handle.execute_update(apps.Ledger.refuse)
    assert failed.value.failure_type == "Refused"
    assert "refused on purpose" in str(failed.value)

    events = await handle.history()
    names = kinds(events)
    assert names.count("update_accepted") == 3
    assert names.count("update_completed") == 3
    completed = [e.update_completed for e in events if e.HasField("update_completed")]
    assert [c.WhichOneof("outcome") for c in completed] == ["result", "result", "failure"]
    # A failing handler fails the update, never the run.
    assert (await handle.describe()).info.status == "running"
    await handle.signal(apps.Ledger.close)
    assert await handle.result(timeout=30) == 7


async def test_validator_rejection_leaves_history_unchanged(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await started(client, queue, "upd-2")
    before = await settled_history(handle)

    with pytest.raises(UpdateRejectedError) as rejected:
        await handle.execute_update(apps.Ledger.deposit, -3, "bad", update_id="neg-1")
    assert rejected.value.reason == "UPDATE_REJECTED"
    assert "amount must be positive, got -3" in str(rejected.value)
    # The same id gets the same rejection (the handler never runs).
    with pytest.raises(UpdateRejectedError):
        await handle.execute_update(apps.Ledger.deposit, -3, "bad", update_id="neg-1")
    with pytest.raises(UpdateRejectedError) as unknown:
        await handle.execute_update("no_such_update", 1)
    assert "has no update 'no_such_update'" in str(unknown.value)

    assert await settled_history(handle) == before, "a rejected update must leave no trace"
    assert await handle.query(apps.Ledger.count) == 0


async def test_a_repeated_update_id_runs_the_handler_once(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await started(client, queue, "upd-3")
    first = await handle.execute_update(apps.Ledger.deposit, 10, "once", update_id="dep-1")
    again = await handle.execute_update(apps.Ledger.deposit, 10, "once", update_id="dep-1")
    assert first == again == apps.Receipt(10, "once")
    # Concurrent duplicates of a new id: still one execution.
    results = await asyncio.gather(
        *(handle.execute_update(apps.Ledger.deposit, 1, "dup", update_id="dep-2") for _ in range(3))
    )
    assert results == [apps.Receipt(11, "dup")] * 3
    assert await handle.query(apps.Ledger.count) == 2
    assert accepted_ids(await handle.history()) == ["dep-1", "dep-2"]


async def test_update_awaiting_an_activity_survives_a_worker_kill(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., FeatureWorker],
    test_log: Path,
    queue: str,
) -> None:
    first = spawn_worker(server.address, queue)  # slow_charge blocks in this worker
    handle = await started(client, queue, "upd-4")
    update = await handle.start_update(apps.Ledger.charge, 7, wait_for="accepted")
    assert update.update_id
    wait_for(lambda: lines(test_log, "charge-start:7"), what="the charge activity")
    first.kill()  # kill -9 while the update's handler awaits its activity

    spawn_worker(server.address, queue, "--release")
    assert await update.result(timeout=60) == apps.Receipt(-7, "charged:7")
    assert lines(test_log, "charge-done:") == ["charge-done:7"]
    # Asking again by id returns the recorded outcome; nothing runs again.
    again: Any = await handle.execute_update(apps.Ledger.charge, 7, update_id=update.update_id)
    assert again == apps.Receipt(-7, "charged:7")
    assert accepted_ids(await handle.history()) == [update.update_id]

    await handle.signal(apps.Ledger.close)
    assert await handle.result(timeout=30) == -7


async def test_start_update_accepted_then_result_and_offline_replay(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await started(client, queue, "upd-5")
    update = await handle.start_update(apps.Ledger.deposit, 4, "later", wait_for="accepted")
    assert await update.result(timeout=30) == apps.Receipt(4, "later")
    charged = await handle.start_update(apps.Ledger.charge, 1, wait_for="completed")
    assert await charged.result() == apps.Receipt(3, "charged:1")
    with pytest.raises(UpdateRejectedError):
        await handle.start_update(apps.Ledger.deposit, 0, "zero")
    await handle.signal(apps.Ledger.close)
    assert await handle.result(timeout=30) == 3

    history = history_pb2.History(events=await handle.history())
    assert kinds(list(history.events)).count("update_completed") == 2
    result = Replayer([apps.Ledger]).replay(history)
    assert result.ok, result.describe()

    # The replay gate catches code that no longer handles a recorded update.
    broken = Replayer([LedgerWithoutCharge], raise_on_failure=False).replay(history)
    assert not broken.ok
    assert broken.nondeterminism is not None
    assert "AcceptUpdate" in broken.nondeterminism.expected


@workflow.defn(name="Ledger")
class LedgerWithoutCharge:
    """Ledger after its ``charge`` update was deleted."""

    def __init__(self) -> None:
        self.balance = 0
        self.closed = False

    @workflow.update
    def deposit(self, amount: int, note: str) -> apps.Receipt:
        self.balance += amount
        return apps.Receipt(self.balance, note)

    @workflow.signal
    def close(self) -> None:
        self.closed = True

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.closed)
        return self.balance


async def test_update_with_start_starts_once_then_updates_the_open_run(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    async def deposit(amount: int, update_id: str) -> Any:
        return await client.execute_update_with_start(
            apps.Ledger.run,
            id="uws-1",
            task_queue=queue,
            update=apps.Ledger.deposit,
            update_args=(amount, update_id),
            update_id=update_id,
        )

    # The first call starts the run; its first activation runs the update.
    assert await deposit(5, "first") == apps.Receipt(5, "first")
    assert await deposit(2, "second") == apps.Receipt(7, "second")
    # A retried call (same update id) answers the recorded outcome: the handler ran once.
    assert await deposit(2, "second") == apps.Receipt(7, "second")
    handle = client.get_handle("uws-1")
    assert await handle.query(apps.Ledger.count) == 2
    runs = [r async for r in client.list_workflows('WorkflowId = "uws-1"')]
    assert len(runs) == 1, "one run started"

    # A rejected update still started the run it needed, and leaves no trace in it.
    with pytest.raises(UpdateRejectedError, match="amount must be positive"):
        await client.execute_update_with_start(
            apps.Ledger.run,
            id="uws-2",
            task_queue=queue,
            update=apps.Ledger.deposit,
            update_args=(-1, "bad"),
        )
    rejected_run = client.get_handle("uws-2")
    assert accepted_ids(await settled_history(rejected_run)) == []

    update = await client.start_update_with_start(
        apps.Ledger.run,
        id="uws-2",
        task_queue=queue,
        update=apps.Ledger.deposit,
        update_args=(3, "later"),
        wait_for="accepted",
    )
    assert update.workflow_handle.run_id == (await rejected_run.describe()).info.run_id
    assert await update.result() == apps.Receipt(3, "later")
    await handle.signal(apps.Ledger.close)
    assert await handle.result(timeout=30) == 7


def test_the_cli_sends_updates_and_updates_with_start(
    server: ServerProcess, worker: FeatureWorker, queue: str
) -> None:
    started = cli(
        server,
        "update-with-start",
        "Ledger",
        "deposit",
        "--id",
        "upd-cli",
        "--task-queue",
        queue,
        "--update-input",
        '[4, "cli"]',
        "--json",
    )
    assert started.returncode == 0, started.stderr
    answer = json.loads(started.stdout)
    assert answer["result"] == {"balance": 4, "note": "cli"}
    assert answer["workflow_id"] == "upd-cli" and answer["run_id"]

    updated = cli(server, "update", "upd-cli", "deposit", "--input", '[3, "more"]')
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout) == {"balance": 7, "note": "more"}

    rejected = cli(server, "update", "upd-cli", "deposit", "--input", '[-1, "bad"]')
    assert rejected.returncode != 0 and "UPDATE_REJECTED" in rejected.stderr
    failed = cli(server, "update", "upd-cli", "refuse")
    assert failed.returncode == 2 and "refused on purpose" in failed.stderr
