"""Calls the server deduplicates by request id are retried on UNAVAILABLE, same request.

A real gRPC server on a loopback socket plays a replica that fails the first attempts."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import grpc
import pytest

from durable_rpc.client import Client
from durable_rpc.client._client import DEDUPLICATED_CALL_ATTEMPTS
from durable_rpc.errors import StoreUnavailableError
from durable_rpc.v1 import service_pb2

SERVICE = "durable_rpc.v1.WorkflowService"


@dataclass
class FlakyReplica:
    """Answers StartWorkflow after failing ``failures`` attempts with UNAVAILABLE."""

    failures: int
    request_ids: list[str] = field(default_factory=list)

    async def start(
        self, request: service_pb2.StartWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.StartWorkflowResponse:
        self.request_ids.append(request.request_id)
        if len(self.request_ids) <= self.failures:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "replica going away")
        return service_pb2.StartWorkflowResponse(run_id=f"run-of-{request.request_id}")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[FlakyReplica], Awaitable[Client]]]:
    servers: list[grpc.aio.Server] = []
    clients: list[Client] = []

    async def start(replica: FlakyReplica) -> Client:
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "StartWorkflow": grpc.unary_unary_rpc_method_handler(
                    replica.start,
                    request_deserializer=service_pb2.StartWorkflowRequest.FromString,
                    response_serializer=service_pb2.StartWorkflowResponse.SerializeToString,
                )
            },
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        client = await Client.connect(f"127.0.0.1:{port}")
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()
    for server in servers:
        await server.stop(None)


async def test_start_is_retried_with_the_same_request_id(
    serve: Callable[[FlakyReplica], Awaitable[Client]],
) -> None:
    replica = FlakyReplica(failures=2)
    client = await serve(replica)
    handle = await client.start_workflow("Order", id="o-1", task_queue="q")
    assert len(replica.request_ids) == 3
    assert len(set(replica.request_ids)) == 1
    assert handle.run_id == f"run-of-{replica.request_ids[0]}"


async def test_start_gives_up_after_bounded_attempts(
    serve: Callable[[FlakyReplica], Awaitable[Client]],
) -> None:
    replica = FlakyReplica(failures=100)
    client = await serve(replica)
    with pytest.raises(StoreUnavailableError, match="replica going away"):
        await client.start_workflow("Order", id="o-1", task_queue="q", request_id="r-1")
    assert replica.request_ids == ["r-1"] * DEDUPLICATED_CALL_ATTEMPTS
