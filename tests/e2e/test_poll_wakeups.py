"""Wake-ups of long polls reach a poll that can take the task.

An arrival wakes one waiting poll; a poll whose filter excludes the task passes the
wake-up on. Two activity pollers with disjoint activity sets wait on one queue of a real
server (SQLite file, gRPC over a socket); the task of the poll that registered last is
scheduled first, which the first poll is woken for (the wake-up that was lost).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.server import Server, ServerConfig
from durable_rpc.v1 import service_pb2, workflow_task_pb2
from tests.e2e.test_handoff import until

pytestmark = pytest.mark.timeout(120)
QUEUE = "q"
ACTIVITY_KEY = ("default", QUEUE, "activity")
ROUNDS = 20
#: Every activity must be claimed this soon after it is scheduled (the poll deadline
#: below is far longer: a lost wake-up shows as a poll waiting for it).
CLAIM_WITHIN_S = 1.0


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    config = ServerConfig(
        db_url=f"sqlite:///{tmp_path / 'wakeups.db'}", listen="127.0.0.1:0", poll_timeout_s=5
    )
    running = Server(config)
    await running.start()
    yield running
    await running.stop()


async def schedule_activity(client: Client, workflow_id: str, activity_type: str) -> float:
    """Start a run and schedule one ``activity_type`` activity as its first decision (a
    raw workflow worker); returns the monotonic time just before the decision was sent."""
    service = client.worker_service
    await client.workflow_service.StartWorkflow(
        service_pb2.StartWorkflowRequest(
            namespace="default",
            workflow_id=workflow_id,
            workflow_type="Order",
            task_queue=QUEUE,
            request_id=f"req-{workflow_id}",
        )
    )
    task = await service.PollWorkflowTask(
        service_pb2.PollWorkflowTaskRequest(
            namespace="default", task_queue=QUEUE, worker_id="decider"
        )
    )
    assert task.workflow_id == workflow_id
    command = workflow_task_pb2.Command(
        seq=1, schedule_activity=workflow_task_pb2.ScheduleActivity(activity_type=activity_type)
    )
    command.schedule_activity.options.start_to_close_timeout.FromSeconds(60)
    scheduled_at = time.monotonic()
    await service.CompleteWorkflowTask(
        service_pb2.CompleteWorkflowTaskRequest(
            namespace="default",
            lease=service_pb2.Lease(
                task_id=task.task_id, worker_id="decider", fencing_token=task.fencing_token
            ),
            last_seen_event_id=len(task.history.events),
            commands=[command],
        )
    )
    return scheduled_at


async def poll_activity(
    client: Client, worker_id: str, activity_type: str
) -> tuple[service_pb2.PollActivityTaskResponse, float]:
    response = await client.worker_service.PollActivityTask(
        service_pb2.PollActivityTaskRequest(
            namespace="default",
            task_queue=QUEUE,
            worker_id=worker_id,
            activity_types=[activity_type],
        ),
        timeout=30,  # far past any poll deadline here: a poll that never answers fails
    )
    return response, time.monotonic()


async def test_every_activity_reaches_the_poll_that_can_take_it(server: Server) -> None:
    assert server.handoffs is not None
    waiters = server.handoffs.waiters
    latencies: dict[str, list[float]] = {"a": [], "b": []}
    async with await Client.connect(f"127.0.0.1:{server.port}") as client:
        for round_ in range(ROUNDS):
            # Both polls already waiting, "a" registered first: its poll is woken first.
            poll_a = asyncio.ensure_future(poll_activity(client, "worker-a", "a"))
            await until(lambda: waiters.waiting(ACTIVITY_KEY) == 1, "poll a to wait")
            poll_b = asyncio.ensure_future(poll_activity(client, "worker-b", "b"))
            await until(lambda: waiters.waiting(ACTIVITY_KEY) == 2, "poll b to wait")
            for activity_type, poll in (("b", poll_b), ("a", poll_a)):
                scheduled_at = await schedule_activity(
                    client, f"wf-{round_}-{activity_type}", activity_type
                )
                claimed, claimed_at = await poll
                assert claimed.activity_type == activity_type, (
                    f"round {round_}: poll {activity_type} claimed nothing before its deadline"
                )
                latency = claimed_at - scheduled_at
                assert latency < CLAIM_WITHIN_S, (
                    f"round {round_}: activity {activity_type} claimed {latency:.3f} s after "
                    "it was scheduled"
                )
                latencies[activity_type].append(latency)
    for activity_type, values in latencies.items():
        print(
            f"claim latency {activity_type}: median {statistics.median(values) * 1000:.1f} ms, "
            f"max {max(values) * 1000:.1f} ms over {len(values)}"
        )


async def test_a_taken_task_wakes_no_other_idle_poll(tmp_path: Path) -> None:
    """Eight idle polls of one activity type: the one woken takes the task, and since
    nothing is left to claim the wake-up stops there. (It used to travel on to all seven
    others, each a claim transaction finding nothing: with two replicas every NOTIFY did
    that to the other replica's idle polls, 4.5 wasted claims a workflow.)"""
    config = ServerConfig(
        db_url=f"sqlite:///{tmp_path / 'idle.db'}", listen="127.0.0.1:0", poll_timeout_s=1
    )
    server = Server(config)
    await server.start()
    try:
        assert server.handoffs is not None and server.store is not None
        waiters = server.handoffs.waiters
        async with await Client.connect(f"127.0.0.1:{server.port}") as client:
            polls = []
            for i in range(8):
                polls.append(asyncio.ensure_future(poll_activity(client, f"idle-{i}", "a")))
                await until(lambda n=i + 1: waiters.waiting(ACTIVITY_KEY) == n, "polls to wait")
            before = server.store.stats.operations
            await schedule_activity(client, "wf-idle", "a")
            # Every poll ends: the claimer at once, the others at their deadline (each
            # after one last claim). So every claim that was going to happen has.
            results = await asyncio.gather(*polls)
            claimed = [r for r, _ in results if r.activity_type]
            assert len(claimed) == 1
            spent = server.store.stats.operations - before
            # Start, the decider's claim and decision, the activity claim, the 7 last
            # claims and a due pass: 12 (19 while the wake-up went on to all seven).
            assert spent <= 12, f"{spent} write operations for one activity and 8 polls"
    finally:
        await server.stop()
