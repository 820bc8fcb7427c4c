"""Protocol and capabilities through a real server: GetServerInfo's fields, a worker
whose protocol the server does not serve refused before it registers anything (raw gRPC
call), and the worker SDK's own check at start."""

from __future__ import annotations

import grpc
import pytest

from durable_rpc import Client, Worker, _protocol, activity
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.errors import ProtocolVersionUnsupportedError
from durable_rpc.v1 import admin_service_pb2, admin_service_pb2_grpc, service_pb2, service_pb2_grpc
from tests.e2e.conftest import ServerProcess


@activity.defn
async def noop() -> None:
    return None


def _registered_workers(address: str) -> list[str]:
    with grpc.insecure_channel(address) as channel:
        reply = admin_service_pb2_grpc.AdminServiceStub(channel).ListWorkers(
            admin_service_pb2.ListWorkersRequest(namespace="default", include_dead=True), timeout=10
        )
    return [w.worker_id for w in reply.workers]


def test_get_server_info_names_the_protocol_range_capabilities_and_release(
    server: ServerProcess,
) -> None:
    with grpc.insecure_channel(server.address) as channel:
        info = service_pb2_grpc.WorkerServiceStub(channel).GetServerInfo(
            service_pb2.GetServerInfoRequest(), timeout=10
        )
    assert (info.min_protocol_version, info.protocol_version) == (1, 1)
    assert list(info.capabilities) == list(_protocol.SERVER_CAPABILITIES)
    assert "query_tasks" in info.capabilities
    assert info.server_version == _protocol.server_version() != ""


def test_a_worker_protocol_outside_the_range_is_refused_naming_both(
    server: ServerProcess,
) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.WorkerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.RegisterWorker(
                service_pb2.RegisterWorkerRequest(
                    namespace="default",
                    worker_id="from-the-future",
                    task_queue="q",
                    activities=["noop"],
                    protocol_version=99,
                ),
                timeout=10,
            )
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        error = from_rpc_error(caught.value)
        assert isinstance(error, ProtocolVersionUnsupportedError)
        assert error.reason == "PROTOCOL_VERSION_UNSUPPORTED"
        assert "protocol 99" in error.message and "1..1" in error.message
        # An unset version (a worker from before the field) is protocol 1: served, and
        # told which of its capabilities the server shares.
        reply = stub.RegisterWorker(
            service_pb2.RegisterWorkerRequest(
                namespace="default",
                worker_id="old-worker",
                task_queue="q",
                activities=["noop"],
                capabilities=["query_tasks", "teleportation"],
            ),
            timeout=10,
        )
    assert list(reply.capabilities) == ["query_tasks"]
    assert reply.protocol_version == 1
    assert _registered_workers(server.address) == ["old-worker"]


async def test_the_worker_sdk_refuses_a_server_too_old_for_it(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await Client.connect(server.address)
    try:
        worker = Worker(client, task_queue="q", activities=[noop], worker_id="w-new")
        # This process's worker now speaks a protocol newer than the server serves.
        monkeypatch.setattr(_protocol, "PROTOCOL_VERSION", 2)
        with pytest.raises(ProtocolVersionUnsupportedError) as caught:
            await worker.start()
        assert "this worker speaks protocol 2" in caught.value.message
        assert "serves 1..1: upgrade the server" in caught.value.message
        assert _registered_workers(server.address) == []
        monkeypatch.setattr(_protocol, "PROTOCOL_VERSION", 1)
        await worker.start()
        assert worker.server_info is not None and worker.server_info.protocol_version == 1
        assert worker.negotiated_capabilities == _protocol.WORKER_CAPABILITIES
        await worker.stop()
    finally:
        await client.close()
