"""Build-id pinning through a real server: two builds and an unversioned worker on one
queue: an explicit build_id pins new runs to that deployment build, a different build
cannot take an existing pinned run, and a worker without one keeps unversioned routing."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from durable_rpc import Client, Worker, activity, workflow
from durable_rpc.client import WorkflowHandle
from durable_rpc.v1 import history_pb2
from tests.e2e.conftest import eventually

pytestmark = pytest.mark.timeout(180)
QUEUE = "deploys"


@activity.defn
async def ship(n: int) -> int:
    return n + 1


@workflow.defn(name="Shipment")
class Shipment:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, n: int) -> int:
        # Two workflow tasks at least: the start, then the signal (and the activity's).
        await workflow.wait_condition(lambda: self.go)
        return int(
            await workflow.execute_activity(ship, n, start_to_close_timeout=timedelta(seconds=30))
        )


def worker(client: Client, worker_id: str, build_id: str) -> Worker:
    return Worker(
        client,
        task_queue=QUEUE,
        workflows=[Shipment],
        activities=[ship],
        worker_id=worker_id,
        build_id=build_id,
    )


async def pin_of(client: Client, handle: WorkflowHandle) -> str:
    return (await handle.describe()).build_id


def deciders(history: list[history_pb2.HistoryEvent]) -> set[tuple[str, str]]:
    """(worker id, build id) of every recorded decision of the run."""
    return {
        (e.workflow_task_completed.worker_id, e.workflow_task_completed.build_id)
        for e in history
        if e.WhichOneof("attributes") == "workflow_task_completed"
    }


async def start_pinned(
    client: Client, prefix: str, build_id: str, count: int = 3
) -> list[WorkflowHandle]:
    handles = [
        await client.start_workflow("Shipment", i, id=f"{prefix}-{i}", task_queue=QUEUE)
        for i in range(count)
    ]

    async def pinned() -> bool:
        return all([await pin_of(client, h) == build_id for h in handles])

    await eventually(pinned, what=f"{prefix} runs pinned to {build_id}")
    return handles


async def finish(handles: list[WorkflowHandle]) -> list[object]:
    for handle in handles:
        await handle.signal("proceed")
    return list(await asyncio.gather(*(h.result() for h in handles)))


async def test_runs_stay_on_the_build_that_started_them(client: Client) -> None:
    # Only build A runs: its runs are pinned to it by their first decision.
    a = worker(client, "a", "build-a")
    async with a:
        on_a = await start_pinned(client, "on-a", "build-a")
        # Build B and an unversioned worker poll the same queue while A's runs move on.
        b, plain = worker(client, "b", "build-b"), worker(client, "plain", "")
        async with b, plain:
            assert await finish(on_a) == [1, 2, 3]
            for handle in on_a:
                assert deciders(await handle.history()) == {("a", "build-a")}
            await a.stop()
            # A is gone: B's new runs are pinned to B, while the unversioned worker
            # polls beside it. (It would take unpinned runs: none are left.)
            async with worker(client, "b2", "build-b"):
                await plain.stop()
                on_b = await start_pinned(client, "on-b", "build-b")
                # The unversioned worker is back, and build A too: neither takes B's runs.
                async with worker(client, "plain2", ""), worker(client, "a2", "build-a"):
                    assert await finish(on_b) == [1, 2, 3]
    for handle in on_b:
        assert {build for _, build in deciders(await handle.history())} == {"build-b"}


async def test_an_unversioned_worker_keeps_unversioned_routing(client: Client) -> None:
    async with worker(client, "plain", ""):
        handles = await start_pinned(client, "plain", "")
        # Wait for the first decisions (recorded: the runs wait for their signal).
        for handle in handles:

            async def decided(h: WorkflowHandle = handle) -> bool:
                return bool(deciders(await h.history()))

            await eventually(decided, what="the first decision")
    # The unversioned worker is gone: a versioned one takes the unversioned runs.
    async with worker(client, "a", "build-a"):
        assert await finish(handles) == [1, 2, 3]
    for handle in handles:
        assert await pin_of(client, handle) == ""
        assert ("a", "build-a") in deciders(await handle.history())
