"""An activity report is fenced by its lease's token over a real server: a poller that
restarted with the same worker id, or another worker id presenting the holder's task id
and token, gets LEASE_LOST, and nothing it sent is recorded."""

from __future__ import annotations

import uuid

import pytest

from durable_rpc import Client, payload
from durable_rpc.errors import LeaseLostError
from durable_rpc.v1 import options_pb2, payload_pb2, service_pb2, workflow_task_pb2
from tests.e2e.conftest import ServerProcess, eventually

pytestmark = [pytest.mark.timeout(60), pytest.mark.also_on_postgres]

NS = "default"


def _short_lease() -> options_pb2.ActivityOptions:
    """A 1 s lease (the heartbeat timeout) inside a long start_to_close."""
    options = options_pb2.ActivityOptions()
    options.start_to_close_timeout.FromSeconds(60)
    options.heartbeat_timeout.FromSeconds(1)
    options.retry_policy.initial_interval.FromMilliseconds(10)
    return options


def _completion(
    task: service_pb2.PollActivityTaskResponse, worker_id: str, value: str
) -> service_pb2.CompleteActivityTaskRequest:
    return service_pb2.CompleteActivityTaskRequest(
        namespace=NS,
        lease=service_pb2.Lease(
            task_id=task.task_id, worker_id=worker_id, fencing_token=task.fencing_token
        ),
        result=payload_pb2.Payload(data=payload.encode(value)),
    )


async def test_an_activity_report_with_a_stale_or_borrowed_token_is_lease_lost(
    server: ServerProcess, client: Client
) -> None:
    q = f"q-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow("Anything", id="fenced-1", task_queue=q)
    stub = client.worker_service
    decision = await stub.PollWorkflowTask(
        service_pb2.PollWorkflowTaskRequest(namespace=NS, task_queue=q, worker_id="w1")
    )
    assert decision.task_id
    schedule = workflow_task_pb2.Command(
        seq=1,
        schedule_activity=workflow_task_pb2.ScheduleActivity(
            activity_type="act",
            input=payload_pb2.Payload(data=payload.encode(["in"])),
            options=_short_lease(),
        ),
    )
    await client.call(
        stub.CompleteWorkflowTask,
        service_pb2.CompleteWorkflowTaskRequest(
            namespace=NS,
            lease=service_pb2.Lease(
                task_id=decision.task_id, worker_id="w1", fencing_token=decision.fencing_token
            ),
            last_seen_event_id=decision.history.events[-1].event_id,
            commands=[schedule],
        ),
    )
    poll = service_pb2.PollActivityTaskRequest(namespace=NS, task_queue=q, worker_id="aw1")
    stale = await stub.PollActivityTask(poll)
    assert stale.task_id and stale.fencing_token == 1

    # The lease expires; the same worker id polls again and gets the attempt back.
    fresh = service_pb2.PollActivityTaskResponse()

    async def reclaimed() -> bool:
        nonlocal fresh
        fresh = await stub.PollActivityTask(poll)
        return bool(fresh.task_id)

    await eventually(reclaimed, timeout=30, what="the expired attempt to be claimed again")
    assert (fresh.task_id, fresh.fencing_token) == (stale.task_id, 2)

    before = await handle.history()
    with pytest.raises(LeaseLostError):
        await client.call(stub.CompleteActivityTask, _completion(stale, "aw1", "stale"))
    with pytest.raises(LeaseLostError):
        await client.call(stub.CompleteActivityTask, _completion(fresh, "aw2", "borrowed"))
    assert await handle.history() == before, "a report without the lease changed history"

    await client.call(stub.CompleteActivityTask, _completion(fresh, "aw1", "fresh"))
    completed = (await handle.history())[-1].activity_completed
    assert (completed.fencing_token, completed.result.data) == (2, payload.encode("fresh"))
