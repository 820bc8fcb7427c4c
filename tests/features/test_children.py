"""Child workflows against a real server: typed results and failures, start errors,
cancellation from the parent, parent-close policies, a worker SIGKILL, replay."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from durable_rpc import Client, workflow
from durable_rpc.errors import NotFoundError
from durable_rpc.testing import Replayer
from durable_rpc.v1 import history_pb2
from tests.e2e.conftest import ServerProcess
from tests.features import child_apps
from tests.features.child_apps import Kid
from tests.features.conftest import FeatureWorker

pytestmark = pytest.mark.timeout(120)


def kinds(events: list[Any]) -> list[str]:
    return [e.WhichOneof("attributes") for e in events]


async def run_parent(
    client: Client, queue: str, wf_id: str, action: str, child: str, policy: str = "TERMINATE"
) -> Any:
    handle = await client.start_workflow(
        child_apps.Parent.run, action, child, policy, id=wf_id, task_queue=queue
    )
    return handle, await handle.result(timeout=60)


async def test_child_result_is_typed(client: Client, worker: FeatureWorker, queue: str) -> None:
    handle, result = await run_parent(client, queue, "p-1", "result", "p-1-kid")
    assert result == {"n": 2, "typed": True}
    events = await handle.history()
    assert "child_workflow_initiated" in kinds(events)
    started = next(e for e in events if e.HasField("child_workflow_started"))
    assert started.child_workflow_started.seq == 1
    kid = client.get_handle("p-1-kid")
    description = await kid.describe()
    assert description.info.status == "completed"
    kid_started = (await kid.history())[0].workflow_started
    assert kid_started.parent_run_id == handle.run_id
    assert kid_started.parent_seq == 1
    assert kid_started.parent_workflow_id == "p-1"


async def test_child_that_continues_as_new_is_the_same_child(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle, result = await run_parent(client, queue, "p-2", "cont", "p-2-kid")
    assert result == {"n": 3, "typed": True}
    closes = [k for k in kinds(await handle.history()) if k.startswith("child_workflow_")]
    assert closes == [
        "child_workflow_initiated",
        "child_workflow_started",
        "child_workflow_completed",
    ]


async def test_child_failure_is_typed_in_the_parent(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    _, result = await run_parent(client, queue, "p-3", "fail", "p-3-kid")
    assert result == {
        "status": "failed",
        "cause_type": "KidFailed",
        "cause": "kid 3 failed",
        "id": "p-3-kid",
    }


async def test_child_id_already_running_is_a_typed_start_error(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    other = await client.start_workflow(Kid.run, 0, "wait", id="p-4-kid", task_queue=queue)
    handle, result = await run_parent(client, queue, "p-4", "dup", "p-4-kid")
    assert result == {"reason": "WORKFLOW_ALREADY_STARTED", "id": "p-4-kid"}
    assert "child_workflow_start_failed" in kinds(await handle.history())
    await other.signal(Kid.finish)
    assert (await other.result(timeout=30)).n == 0


async def test_cancel_from_the_parent(client: Client, worker: FeatureWorker, queue: str) -> None:
    handle, result = await run_parent(client, queue, "p-5", "cancel", "p-5-kid")
    assert result["status"] == "cancelled"
    assert result["id"] == "p-5-kid"
    assert "child_cancel_requested" in kinds(await handle.history())
    kid = client.get_handle("p-5-kid", run_id=result["run_id"])
    assert "cancel_requested" in kinds(await kid.history())
    assert (await kid.describe()).info.status == "cancelled"


@pytest.mark.parametrize(
    ("policy", "status"),
    [("TERMINATE", "terminated"), ("REQUEST_CANCEL", "cancelled"), ("ABANDON", "running")],
)
async def test_parent_close_policy(
    client: Client, worker: FeatureWorker, queue: str, policy: str, status: str
) -> None:
    kid_id = f"p-6-{policy}-kid"
    _, result = await run_parent(client, queue, f"p-6-{policy}", "policy", kid_id, policy)
    kid = client.get_handle(kid_id, run_id=result["run_id"])
    if status == "cancelled":
        with pytest.raises(Exception):  # noqa: B017 - the cancelled error of the client
            await kid.result(timeout=30)
    assert (await kid.describe()).info.status == status
    if status == "running":
        await kid.signal(Kid.finish)
        assert (await kid.result(timeout=30))["n"] == 0


async def test_parent_survives_a_worker_kill_while_the_child_runs(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., FeatureWorker],
    queue: str,
) -> None:
    first = spawn_worker(server.address, queue)
    handle = await client.start_workflow(
        child_apps.Parent.run, "wait", "p-7-kid", "TERMINATE", id="p-7", task_queue=queue
    )
    kid = client.get_handle("p-7-kid")
    for _ in range(200):
        try:
            if (await kid.describe()).info.status == "running":
                events = await handle.history()
                if "child_workflow_started" in kinds(events):
                    break
        except NotFoundError:
            pass
        await asyncio.sleep(0.05)
    first.kill()  # kill -9 while the child is open
    spawn_worker(server.address, queue, "--release")
    await kid.signal(Kid.finish)
    assert await handle.result(timeout=60) == {"n": 2, "typed": True}


@workflow.defn(name="Parent")
class ParentWithOtherChildId:
    """Changed: starts the child under another id."""

    @workflow.run
    async def run(self, action: str, child_id: str, policy: str) -> dict[str, object]:
        await workflow.execute_child_workflow(Kid.run, 2, "ok", id=child_id + "-x")
        return {}


async def test_replayer_on_a_history_with_a_child(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle, _ = await run_parent(client, queue, "p-8", "result", "p-8-kid")
    history = history_pb2.History(events=await handle.history())
    assert Replayer([child_apps.Parent, Kid]).replay(history).ok
    returning = Replayer([ParentWithOtherChildId, Kid], raise_on_failure=False)
    error = returning.replay(history).nondeterminism
    assert error is not None
    assert error.seq == 1
    assert error.expected == 'StartChildWorkflow(seq=1, type="Kid", id="p-8-kid")'
    assert error.actual == 'StartChildWorkflow(seq=1, type="Kid", id="p-8-kid-x")'


async def test_child_start_options_reach_the_child_run(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle, result = await run_parent(client, queue, "p-opt", "options", "p-opt-kid")
    assert result == {"status": "timed_out"}, "the child's execution timeout ended it"
    kid = await client.get_handle("p-opt-kid").describe()
    assert kid.info.status == "timed_out"
    assert kid.info.memo == {"from": "parent"}
    assert kid.info.search_attributes == {"CustomerId": "kid-of-p"}
    started = (await client.get_handle("p-opt-kid").history())[0].workflow_started
    assert started.execution_timeout.ToMilliseconds() == 700
    assert started.parent_run_id == handle.run_id


async def test_two_children_started_by_one_task(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle, result = await run_parent(client, queue, "p-two", "two", "p-two-kid")
    assert result == {"n": [5, 6]}
    names = kinds(await handle.history())
    # A task's command events come first, then the inputs they caused.
    first_task = names[names.index("workflow_task_completed") + 1 :][:4]
    assert first_task == [
        "child_workflow_initiated",
        "child_workflow_initiated",
        "child_workflow_started",
        "child_workflow_started",
    ]


async def test_a_parent_signals_its_child_and_a_missing_run(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle, result = await run_parent(client, queue, "p-sig", "signal", "p-sig-kid")
    assert result == {"n": 7, "ghost": "NOT_FOUND"}
    names = kinds(await handle.history())
    assert names.count("external_signal_initiated") == 2
    assert names.count("external_signal_delivered") == 1
    assert names.count("external_signal_failed") == 1
    kid = kinds(await client.get_handle("p-sig-kid").history())
    assert "signal_received" in kid
