"""grpc.health.v1 follows the SQLite store of a real server process: NOT_SERVING while
the database file is gone or not writable, SERVING again once it is back. Statuses are
awaited on the health Watch stream (the server pushes each change), not polled."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from durable_rpc._rpc_status import reason_of
from durable_rpc.v1 import service_pb2
from tests.e2e.conftest import ROOT, ServerProcess

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
NAMES = ("", "durable_rpc.v1.WorkflowService", "durable_rpc.v1.WorkerService")


def await_status(address: str, status: int, timeout: float = 30.0) -> None:
    """Waits until every served name reports ``status`` (Watch answers at once with the
    current status, then with each change)."""
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in NAMES:
            replies = stub.Watch(health_pb2.HealthCheckRequest(service=name), timeout=timeout)
            try:
                for reply in replies:
                    if reply.status == status:
                        break
            except grpc.RpcError as exc:
                raise AssertionError(f"health of {name!r} never became {status}: {exc}") from exc
            finally:
                replies.cancel()
            check = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert check.status == status, (name, check.status)


def assert_unavailable_without_path(server: ServerProcess) -> None:
    """A call during the outage is UNAVAILABLE with a reason and no server path."""
    with grpc.insecure_channel(server.address) as channel:
        describe = channel.unary_unary(
            "/durable_rpc.v1.WorkflowService/DescribeWorkflow",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=service_pb2.DescribeWorkflowResponse.FromString,
        )
        with pytest.raises(grpc.RpcError) as info:
            describe(service_pb2.DescribeWorkflowRequest(workflow_id="w"), timeout=10)
    error = info.value
    assert isinstance(error, grpc.Call)
    assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
    assert reason_of(error) == "UNAVAILABLE"
    details = error.details() or ""
    for path in (str(server.db_path.parent), str(ROOT)):
        assert path not in details, details


def test_health_is_not_serving_while_the_database_file_is_gone(server: ServerProcess) -> None:
    await_status(server.address, SERVING)
    away = server.db_path.with_name("moved-away.db")
    os.rename(server.db_path, away)
    try:
        await_status(server.address, NOT_SERVING)
        assert_unavailable_without_path(server)
    finally:
        os.rename(away, server.db_path)
    await_status(server.address, SERVING)


@pytest.fixture
def lock_file(server: ServerProcess) -> Iterator[Callable[[bool], None]]:
    """Makes the database file unwritable (chmod for a user; root writes through modes,
    so an immutable attribute), and undoes it at the end whatever happened."""
    path = server.db_path
    state = {"locked": False}

    def lock(on: bool) -> None:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True, timeout=30)
        else:
            path.chmod(0o444 if on else 0o644)
        state["locked"] = on

    yield lock
    if state["locked"]:
        lock(False)


def test_health_is_not_serving_while_the_database_file_is_unwritable(
    server: ServerProcess, lock_file: Callable[[bool], None]
) -> None:
    await_status(server.address, SERVING)
    lock_file(True)
    await_status(server.address, NOT_SERVING)
    lock_file(False)
    await_status(server.address, SERVING)
