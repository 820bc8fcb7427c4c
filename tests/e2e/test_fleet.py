"""Seeing the fleet through a real server process: worker counters carried by
the heartbeat, ListWorkers, DescribeTaskQueue, their CLI, and describe's stuck reason
for each way a run can wait (the store twin: tests/store/test_stuck_reason.py)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import time
from datetime import timedelta

import pytest

from durable_rpc import Client, Worker, activity, workflow
from durable_rpc.v1 import admin_service_pb2 as pb
from durable_rpc.v1 import service_pb2
from durable_rpc.worker import WorkflowSupervisorConfig
from durable_rpc.workflow import RetryPolicy
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ServerProcess, eventually

pytestmark = pytest.mark.timeout(120)

#: describe's times: ISO 8601 UTC to the millisecond.
#: A terminal wide enough for the tables (rich wraps to $COLUMNS).
WIDE = {"COLUMNS": "200"}
AT = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)"


@activity.defn
async def fleet_flaky(n: int) -> int:
    if activity.info().attempt == 1:
        raise ConnectionError(f"first try of {n} fails")
    return n


@activity.defn
async def fleet_declined(n: int) -> int:
    raise ValueError("card declined")


@workflow.defn(name="FleetFlaky")
class FleetFlaky:
    @workflow.run
    async def run(self, n: int) -> int:
        return int(
            await workflow.execute_activity(
                fleet_flaky,
                n,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=20)),
            )
        )


@workflow.defn(name="FleetDeclined")
class FleetDeclined:
    @workflow.run
    async def run(self) -> int:
        return int(
            await workflow.execute_activity(
                fleet_declined,
                1,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(initial_interval=timedelta(hours=1)),
            )
        )


@workflow.defn(name="FleetSleeper")
class FleetSleeper:
    @workflow.run
    async def run(self) -> str:
        await workflow.sleep(3600)
        return "woke"


@workflow.defn(name="FleetWaiter")
class FleetWaiter:
    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    async def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released)
        return "released"


@workflow.defn(name="FleetBroken")
class FleetBroken:
    """Every workflow task fails: a call workflow code must not make."""

    @workflow.run
    async def run(self) -> str:
        asyncio.get_running_loop().run_in_executor(None, print)
        return "never"


async def stuck(client: Client, workflow_id: str) -> str:
    return (await client.get_handle(workflow_id).describe()).stuck_reason


async def stuck_matching(client: Client, workflow_id: str, pattern: str) -> re.Match[str]:
    """Describe until the stuck reason matches ``pattern`` whole (the run gets there
    through its first tasks); the match."""
    found: list[re.Match[str]] = []

    async def matches() -> bool:
        match = re.fullmatch(pattern, await stuck(client, workflow_id))
        if match is not None:
            found.append(match)
        return match is not None

    await eventually(matches, what=f"stuck reason of {workflow_id} matching {pattern!r}")
    return found[0]


def seconds_from_now(at: str) -> float:
    moment = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
    return moment.timestamp() - time.time()


async def list_workers(client: Client, **fields: object) -> list[pb.WorkerInfo]:
    request = pb.ListWorkersRequest(namespace="default", **fields)  # type: ignore[arg-type]
    return list((await client.call(client.admin_service.ListWorkers, request)).workers)


async def describe_queue(client: Client, queue: str) -> pb.DescribeTaskQueueResponse:
    request = pb.DescribeTaskQueueRequest(namespace="default", task_queue=queue)
    reply: pb.DescribeTaskQueueResponse = await client.call(
        client.admin_service.DescribeTaskQueue, request
    )
    return reply


async def test_counters_travel_with_the_heartbeat_to_list_workers(client: Client) -> None:
    worker = Worker(
        client,
        task_queue="fleet",
        workflows=[FleetFlaky],
        activities=[fleet_flaky],
        worker_id="fleet-w1",
        build_id="b-7",
        max_concurrent_activities=3,
    )
    async with worker:
        handles = [
            await client.start_workflow(FleetFlaky.run, i, id=f"flaky-{i}", task_queue="fleet")
            for i in range(3)
        ]
        assert [await h.result() for h in handles] == [0, 1, 2]
        (listed,) = await list_workers(client)
        # Nothing is written on the task path: until a heartbeat, the row shows nothing.
        assert listed.counters == service_pb2.WorkerCounters()
        assert (listed.worker_id, listed.task_queue, listed.build_id, listed.live) == (
            "fleet-w1",
            "fleet",
            "b-7",
            True,
        )
        assert [(d.name, d.version) for d in listed.definitions] == [("FleetFlaky", "1")]
        assert list(listed.activities) == ["fleet_flaky"]

        reported: list[service_pb2.WorkerCounters] = []

        async def settled() -> bool:
            await worker.heartbeat()
            (w,) = await list_workers(client, task_queue="fleet")
            reported.append(w.counters)
            return w.counters.slots_in_use == 0

        await eventually(settled, what="an idle worker's heartbeat")
        counters = reported[-1]
        # 3 runs: 3 activity failures, 3 successful retries, and their workflow tasks
        # (some decided inline with the activity's result: claimed and completed too).
        assert counters.failures == 3
        assert counters.lease_losses == 0
        assert counters.completions >= 6
        assert counters.claims == counters.completions + counters.failures
        # 3 activity slots and half the default supervisor's cycles (the workflow ones).
        slots = 3 + WorkflowSupervisorConfig.default().max_concurrency // 2
        assert counters.slots_total == slots
        queue = await describe_queue(client, "fleet")
        assert [(p.worker_id, p.build_id, p.slots_total) for p in queue.pollers] == [
            ("fleet-w1", "b-7", slots)
        ]
        assert [(d.name, list(d.build_ids), d.live_workers) for d in queue.definitions] == [
            ("FleetFlaky", ["b-7"], 1)
        ]
        assert [(b.kind, b.queued, b.leased, b.waiting, b.recoverable) for b in queue.backlog] == [
            ("workflow", 0, 0, 0, 0),
            ("activity", 0, 0, 0, 0),
        ]
    # Deregistered on stop: gone even from --all.
    assert await list_workers(client, include_dead=True) == []


async def test_cli_worker_list_and_task_queue_describe(
    server: ServerProcess, client: Client
) -> None:
    await client.start_workflow(FleetSleeper.run, id="queued-1", task_queue="backlogged")
    async with Worker(client, task_queue="cli-fleet", activities=[fleet_flaky], worker_id="cli-w"):
        listed = await run_cli_async("worker", "list", "--json", address=server.address)
        assert listed.returncode == 0, listed.stderr
        (w,) = json.loads(listed.stdout)["workers"]
        assert (w["workerId"], w["taskQueue"], w["live"]) == ("cli-w", "cli-fleet", True)
        table = await run_cli_async(
            "worker", "list", "--task-queue", "cli-fleet", address=server.address, env=WIDE
        )
        assert table.returncode == 0, table.stderr
        assert "cli-w" in table.stdout and "leases lost" in table.stdout
        other = await run_cli_async(
            "worker", "list", "--task-queue", "elsewhere", "--json", address=server.address
        )
        assert json.loads(other.stdout) == {}
    described = await run_cli_async(
        "task-queue", "describe", "backlogged", "--json", address=server.address
    )
    assert described.returncode == 0, described.stderr
    data = json.loads(described.stdout)
    workflow_backlog = data["backlog"][0]
    assert (workflow_backlog["kind"], workflow_backlog["queued"]) == ("workflow", "1")
    assert workflow_backlog["oldestQueuedAge"].endswith("s")
    assert "pollers" not in data  # nobody serves the queue
    table = await run_cli_async(
        "task-queue", "describe", "backlogged", address=server.address, env=WIDE
    )
    assert table.returncode == 0, table.stderr
    assert "task queue backlogged: backlog" in table.stdout
    refused = await run_cli_async("task-queue", "describe", "q" * 1001, address=server.address)
    assert refused.returncode != 0
    assert "task_queue is 1001 bytes long" in refused.stderr
    # The list names the backlogged queue nobody serves and the worker's queue (its
    # worker deregistered on stop, so only the backlogged one is left with tasks).
    listed_queues = await run_cli_async("task-queue", "list", "--json", address=server.address)
    assert listed_queues.returncode == 0, listed_queues.stderr
    queues = {q["taskQueue"]: q for q in json.loads(listed_queues.stdout)["taskQueues"]}
    assert queues["backlogged"]["workflowQueued"] == "1"
    assert queues["backlogged"]["oldestQueuedTime"].endswith("Z")
    assert "liveWorkers" not in queues["backlogged"]  # zero: left out of the JSON
    queue_table = await run_cli_async("task-queue", "list", address=server.address, env=WIDE)
    assert queue_table.returncode == 0, queue_table.stderr
    assert "backlogged" in queue_table.stdout and "live/workers" in queue_table.stdout


async def test_stuck_on_a_timer_until_its_time(server: ServerProcess, client: Client) -> None:
    async with Worker(client, task_queue="stuck", workflows=[FleetSleeper]):
        await client.start_workflow(FleetSleeper.run, id="sleeper", task_queue="stuck")
        match = await stuck_matching(client, "sleeper", rf"Waiting on a timer until {AT}\.")
        assert 3500 < seconds_from_now(match.group(1)) <= 3600
        shown = await run_cli_async(
            "workflow", "describe", "sleeper", "--json", address=server.address
        )
        assert json.loads(shown.stdout)["stuck_reason"] == match.group(0)


async def test_stuck_on_a_signal_or_condition_and_not_once_closed(client: Client) -> None:
    async with Worker(client, task_queue="stuck", workflows=[FleetWaiter]):
        handle = await client.start_workflow(FleetWaiter.run, id="waiter", task_queue="stuck")
        await stuck_matching(client, "waiter", r"Waiting for a signal or a condition: .*")
        await handle.signal(FleetWaiter.release)
        assert await handle.result() == "released"
        assert await stuck(client, "waiter") == ""


async def test_stuck_on_an_activity_in_backoff(client: Client) -> None:
    async with Worker(
        client, task_queue="stuck", workflows=[FleetDeclined], activities=[fleet_declined]
    ):
        await client.start_workflow(FleetDeclined.run, id="declined", task_queue="stuck")
        match = await stuck_matching(
            client,
            "declined",
            rf"Waiting for activity 'fleet_declined' \(seq \d+\): in backoff until {AT} "
            r"after 1 attempt \(last error: ValueError: card declined\)\.",
        )
        assert 3500 < seconds_from_now(match.group(1)) <= 3600


async def test_stuck_without_a_live_worker_for_the_definition(client: Client) -> None:
    await client.start_workflow(FleetSleeper.run, id="orphan", task_queue="nobody")
    assert await stuck(client, "orphan") == (
        "No live worker on task queue 'nobody' registers workflow 'FleetSleeper' version "
        "'1', so its workflow tasks are not claimed: start a worker that registers this "
        "definition."
    )


async def test_stuck_on_a_failing_workflow_task(client: Client) -> None:
    async with Worker(client, task_queue="stuck", workflows=[FleetBroken]):
        await client.start_workflow(FleetBroken.run, id="broken", task_queue="stuck")
        match = await stuck_matching(
            client,
            "broken",
            r"Its workflow task is failing: attempt (\d+) failed with (\w+): .+; "
            rf"attempt (\d+) is (due at {AT}|queued|leased by worker .+ until {AT})\.",
        )
        assert int(match.group(3)) == int(match.group(1)) + 1


async def test_stuck_on_a_lease_held_by_a_worker(client: Client) -> None:
    """A raw WorkerService poll claims the workflow task and never reports: the lease
    (the server's 2 s workflow-task lease) is what the run waits for."""
    await client.start_workflow(FleetSleeper.run, id="held", task_queue="raw")
    poll = service_pb2.PollWorkflowTaskRequest(
        namespace="default", task_queue="raw", worker_id="raw-holder"
    )
    task = await client.call(client.worker_service.PollWorkflowTask, poll)
    assert task.task_id
    match = await stuck_matching(
        client,
        "held",
        rf"Its workflow task \(attempt 1\) is leased by worker 'raw-holder' until {AT}: no "
        "other worker takes it before then.",
    )
    assert 0 < seconds_from_now(match.group(1)) <= 2.5


async def test_stuck_without_a_live_worker_of_the_runs_build(client: Client) -> None:
    """A run pinned to build b-1 waits once only b-2 is deployed (claims skip it)."""
    async with Worker(client, task_queue="pinned", workflows=[FleetWaiter], build_id="b-1"):
        handle = await client.start_workflow(FleetWaiter.run, id="pinned", task_queue="pinned")
        await stuck_matching(client, "pinned", r"Waiting for a signal or a condition: .*")
    async with Worker(client, task_queue="pinned", workflows=[FleetWaiter], build_id="b-2"):
        await handle.signal(FleetWaiter.release)
        described = await handle.describe()
        assert not described.definition_available
        assert described.stuck_reason == (
            "No live worker of build 'b-1' on task queue 'pinned' registers workflow "
            "'FleetWaiter' version '1', so its workflow tasks are not claimed: start a "
            "worker of build 'b-1' that registers this definition."
        )
