"""workflow.continue_as_new(): a chain of runs under one workflow id, against a real
server."""

from __future__ import annotations

import pytest

from durable_rpc import Client, workflow
from durable_rpc.testing import Replayer
from durable_rpc.v1 import history_pb2
from tests.features import apps
from tests.features.conftest import FeatureWorker

pytestmark = pytest.mark.timeout(120)


def kinds(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.WhichOneof("attributes") for e in events]


async def test_chain_of_three_runs(client: Client, worker: FeatureWorker, queue: str) -> None:
    handle = await client.start_workflow(
        apps.Looper.run,
        1,
        3,
        [],
        id="loop-1",
        task_queue=queue,
        memo={"note": "vip"},
        search_attributes={"CustomerId": "c-9"},
    )
    first_run = handle.run_id
    assert first_run
    result = await handle.result(timeout=60)
    assert result["leg"] == 3
    assert result["memo"] == {"note": "vip"}
    # Search attributes carry over (upserts included) and keep being upserted.
    assert result["attrs"] == {"Amount": "3", "CustomerId": "c-9"}

    # Walk the chain from the first run: each run has its own fresh history.
    runs = [first_run]
    for _ in range(2):
        events = await client.get_handle("loop-1", run_id=runs[-1]).history()
        assert kinds(events)[0] == "workflow_started"
        assert kinds(events)[-1] == "workflow_continued_as_new"
        assert "workflow_completed" not in kinds(events)
        runs.append(events[-1].workflow_continued_as_new.new_run_id)
    assert result["from"] == ["", runs[0], runs[1]]
    assert len(set(runs)) == 3

    for index, run_id in enumerate(runs):
        run_handle = client.get_handle("loop-1", run_id=run_id)
        events = await run_handle.history()
        started = events[0].workflow_started
        assert started.run_id == run_id
        assert started.continued_from_run_id == ("" if index == 0 else runs[index - 1])
        assert started.workflow_type == "Looper"
        assert started.task_queue == queue
        description = await run_handle.describe()
        assert description.info.run_id == run_id
        assert description.info.workflow_id == "loop-1"
        assert description.info.status == ("completed" if index == 2 else "continued_as_new")
        assert description.info.memo == {"note": "vip"}
        assert description.info.search_attributes["CustomerId"] == "c-9"
        assert description.info.search_attributes["Amount"] == index + 1
        # A run's own result: None for a continued run when not following the chain.
        if index < 2:
            assert await run_handle.result(timeout=10, follow_runs=False) is None
        # From any run of the chain, result() follows to the last one.
        assert (await run_handle.result(timeout=10))["leg"] == 3

    # Without a run id, the handle is on the latest run.
    latest = await client.get_handle("loop-1").describe()
    assert latest.info.run_id == runs[2]


@workflow.defn(name="Looper")
class LooperThatCompletes:
    """Changed: completes where the recorded run continued as new."""

    @workflow.run
    async def run(self, leg: int, legs: int, seen: list[str]) -> dict[str, object]:
        await workflow.sleep(0.05)
        workflow.upsert_search_attributes({"Amount": leg})
        return {}


async def test_replay_checks_the_continue_as_new_command(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.start_workflow(apps.Looper.run, 1, 2, [], id="loop-2", task_queue=queue)
    await handle.result(timeout=60)
    events = await client.get_handle("loop-2", run_id=handle.run_id).history()
    history = history_pb2.History(events=events)
    assert Replayer([apps.Looper]).replay(history).ok
    returning = Replayer([LooperThatCompletes], raise_on_failure=False)
    error = returning.replay(history).nondeterminism
    assert error is not None
    assert (error.expected, error.actual) == ("ContinueAsNew", "CompleteWorkflow")
