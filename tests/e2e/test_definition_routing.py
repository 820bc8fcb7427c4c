"""Workers claim only what they registered, through a real server.

A v1-only and a v2-only worker share one queue during a rolling deploy: each run goes to
the worker of its version, with its version's activity (the two activity sets are
disjoint, so activity wake-ups must reach the right poll too). A run of a version no
worker registers is not claimed at all, and describe says why.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import timedelta

import pytest

from durable_rpc import Client, Worker, activity, workflow
from durable_rpc.v1 import history_pb2
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ServerProcess

pytestmark = pytest.mark.timeout(240)
QUEUE = "orders"
RUNS_PER_VERSION = 50


@activity.defn
async def charge_v1(n: int) -> str:
    return f"v1 charged {n}"


@activity.defn
async def charge_v2(n: int) -> str:
    return f"v2 charged {n}"


@workflow.defn(name="Orders", version="1")
class OrdersV1:
    @workflow.run
    async def run(self, n: int) -> str:
        return str(
            await workflow.execute_activity(
                charge_v1, n, start_to_close_timeout=timedelta(seconds=30)
            )
        )


@workflow.defn(name="Orders", version="2")
class OrdersV2:
    @workflow.run
    async def run(self, n: int) -> str:
        return str(
            await workflow.execute_activity(
                charge_v2, n, start_to_close_timeout=timedelta(seconds=30)
            )
        )


def decided_by(history: list[history_pb2.HistoryEvent]) -> set[str]:
    """The workers that completed the run's workflow tasks."""
    return {
        e.workflow_task_completed.worker_id
        for e in history
        if e.WhichOneof("attributes") == "workflow_task_completed"
    }


async def test_each_version_runs_on_its_worker_and_an_unknown_one_waits(
    server: ServerProcess, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="durable_rpc.worker")
    v1 = Worker(
        client, task_queue=QUEUE, workflows=[OrdersV1], activities=[charge_v1], worker_id="v1"
    )
    v2 = Worker(
        client, task_queue=QUEUE, workflows=[OrdersV2], activities=[charge_v2], worker_id="v2"
    )
    async with v1, v2:
        handles = []
        for i in range(RUNS_PER_VERSION * 2):  # interleaved: v1, v2, v1, ...
            version = str(1 + i % 2)
            handles.append(
                (
                    version,
                    await client.start_workflow(
                        "Orders", i, id=f"order-{i}", task_queue=QUEUE, version=version
                    ),
                )
            )
        stuck = await client.start_workflow(
            "Orders", 0, id="order-v3", task_queue=QUEUE, version="3"
        )
        results = await asyncio.gather(*(handle.result() for _, handle in handles))
        # Zero failed workflow-task attempts: a worker fails (and logs) every task it
        # claims without the run's definition; a retry that succeeds leaves no trace in
        # describe, so the workers' own reports are the witness.
        failed = [r.getMessage() for r in caplog.records if "workflow task" in r.getMessage()]
        assert failed == []
        for (version, handle), result, i in zip(handles, results, range(len(handles)), strict=True):
            assert result == f"v{version} charged {i}"
            description = await handle.describe()
            assert description.last_workflow_task_failure is None, handle.workflow_id
            assert description.workflow_task_attempt == 1, handle.workflow_id
            assert description.definition_available
            assert description.definition_unavailable_reason == ""
            assert decided_by(await handle.history()) == {f"v{version}"}, handle.workflow_id

        # The v3 run: never claimed (its history is its start alone), no failure, and
        # describe says why in one sentence.
        assert [e.WhichOneof("attributes") for e in await stuck.history()] == ["workflow_started"]
        description = await stuck.describe()
        assert description.last_workflow_task_failure is None
        assert not description.definition_available
        reason = (
            "No live worker on task queue 'orders' registers workflow 'Orders' version '3', "
            "so its workflow tasks are not claimed: start a worker that registers this "
            "definition."
        )
        assert description.definition_unavailable_reason == reason
        shown = await run_cli_async(
            "workflow", "describe", "order-v3", "--json", address=server.address
        )
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["definition_unavailable_reason"] == reason
