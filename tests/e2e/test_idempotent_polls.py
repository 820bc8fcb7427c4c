"""Idempotent polls through a real server (raw gRPC): a poll that claimed a task and
lost its response, retried with the same request id, gets the same task and fencing
token back; another request id does not, nor the same one once the lease is gone."""

from __future__ import annotations

import grpc

from durable_rpc import Client, converter
from durable_rpc.v1 import payload_pb2, service_pb2, service_pb2_grpc
from tests.e2e.conftest import ServerProcess

SHORT = 1.5  # seconds: a poll with nothing to claim ends by its deadline


def _empty_or_timed_out(call: object) -> bool:
    """A poll that claimed nothing: an empty response, or its deadline before one."""
    try:
        response = call()  # type: ignore[operator]
    except grpc.RpcError as error:
        return error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    return response.task_id == 0  # type: ignore[no-any-return]


async def test_a_retried_workflow_poll_gets_the_task_its_lost_attempt_claimed(
    server: ServerProcess,
) -> None:
    async with await Client.connect(server.address) as client:
        await client.start_workflow("Lost", id="lost-1", task_queue="polls")
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.WorkerServiceStub(channel)

        def poll(request_id: str) -> service_pb2.PollWorkflowTaskResponse:
            request = service_pb2.PollWorkflowTaskRequest(
                namespace="default", task_queue="polls", worker_id="w1", request_id=request_id
            )
            return stub.PollWorkflowTask(request, timeout=SHORT)  # type: ignore[no-any-return]

        first = poll("poll-1")  # claimed; the worker never sees this response
        assert first.task_id != 0
        again = poll("poll-1")  # the retry of that poll
        assert (again.task_id, again.fencing_token) == (first.task_id, first.fencing_token)
        assert again == first  # the very response: run, history, lease
        # A new poll is not that poll: the task is leased, nothing else is queued.
        assert _empty_or_timed_out(lambda: poll("poll-2"))
        # Once the task is reported its lease is gone: the old id does not get it back
        # (the poll claims afresh: here the run's next workflow task).
        stub.CompleteWorkflowTask(
            service_pb2.CompleteWorkflowTaskRequest(
                namespace="default",
                lease=service_pb2.Lease(
                    task_id=first.task_id, worker_id="w1", fencing_token=first.fencing_token
                ),
            ),
            timeout=10,
        )
        after = poll("poll-1")
        assert (after.task_id, after.fencing_token) != (first.task_id, first.fencing_token)


async def test_a_retried_activity_poll_gets_the_attempt_its_lost_attempt_claimed(
    server: ServerProcess,
) -> None:
    async with await Client.connect(server.address) as client:
        await client.start_workflow("Lost", id="lost-2", task_queue="polls")
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.WorkerServiceStub(channel)
        task = stub.PollWorkflowTask(
            service_pb2.PollWorkflowTaskRequest(
                namespace="default", task_queue="polls", worker_id="w1"
            ),
            timeout=10,
        )
        schedule = service_pb2.CompleteWorkflowTaskRequest(
            namespace="default",
            lease=service_pb2.Lease(
                task_id=task.task_id, worker_id="w1", fencing_token=task.fencing_token
            ),
        )
        command = schedule.commands.add(seq=1)
        command.schedule_activity.activity_type = "charge"
        command.schedule_activity.task_queue = "polls"
        command.schedule_activity.input.CopyFrom(payload_pb2.Payload(data=converter.encode([1])))
        command.schedule_activity.options.start_to_close_timeout.FromSeconds(60)
        stub.CompleteWorkflowTask(schedule, timeout=10)

        def poll(request_id: str) -> service_pb2.PollActivityTaskResponse:
            request = service_pb2.PollActivityTaskRequest(
                namespace="default", task_queue="polls", worker_id="w2", request_id=request_id
            )
            return stub.PollActivityTask(request, timeout=SHORT)  # type: ignore[no-any-return]

        first = poll("a-1")
        assert first.task_id != 0 and first.activity_type == "charge"
        again = poll("a-1")
        assert (again.task_id, again.fencing_token, again.attempt) == (
            first.task_id,
            first.fencing_token,
            first.attempt,
        )
        assert _empty_or_timed_out(lambda: poll("a-2"))


async def test_a_poll_without_a_request_id_is_never_replayed(server: ServerProcess) -> None:
    async with await Client.connect(server.address) as client:
        await client.start_workflow("Lost", id="lost-3", task_queue="polls")
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.WorkerServiceStub(channel)
        request = service_pb2.PollWorkflowTaskRequest(
            namespace="default", task_queue="polls", worker_id="w1"
        )
        assert stub.PollWorkflowTask(request, timeout=SHORT).task_id != 0
        assert _empty_or_timed_out(lambda: stub.PollWorkflowTask(request, timeout=SHORT))
