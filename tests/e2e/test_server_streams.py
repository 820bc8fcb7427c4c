"""Server-streaming RPCs pass the interceptor (server/_interceptor.py) like unary ones,
whatever the handler's style: an async generator (BatchWorkflows, tests/e2e/test_batch.py)
or a coroutine writing with ``context.write`` (grpc's health Watch)."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.e2e.conftest import ServerProcess


async def test_health_watch_streams_the_status(server: ServerProcess) -> None:
    async with grpc.aio.insecure_channel(server.address) as channel:
        watch = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="durable_rpc.v1.WorkflowService"), timeout=10
        )
        first = await watch.read()
        assert isinstance(first, health_pb2.HealthCheckResponse)
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
