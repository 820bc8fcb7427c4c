"""What generic gRPC tooling and operators see: health, reflection, the CLI."""

from __future__ import annotations

import asyncio
import json
import subprocess

import grpc
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from durable_rpc import Client
from tests.cli_process import run_cli
from tests.e2e.conftest import ServerProcess


def test_health_reports_serving_per_service(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "durable_rpc.v1.WorkflowService", "durable_rpc.v1.WorkerService"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING, service


def test_reflection_lists_the_services(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        (reply,) = list(stub.ServerReflectionInfo(iter([request]), timeout=5))
    names = {s.name for s in reply.list_services_response.service}
    assert {"durable_rpc.v1.WorkflowService", "durable_rpc.v1.WorkerService"} <= names
    assert "grpc.health.v1.Health" in names


def test_reflection_v1_lists_and_describes_the_services(server: ServerProcess) -> None:
    """grpc.reflection.v1 (what current grpcurl asks first) beside v1alpha; its messages
    are v1alpha's under a new package, so v1alpha's classes speak it on the wire."""
    with grpc.insecure_channel(server.address) as channel:
        info = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="durable_rpc.v1.WorkflowService"
            ),
            reflection_pb2.ServerReflectionRequest(
                file_containing_symbol="grpc.reflection.v1.ServerReflection"
            ),
        ]
        listed, workflow_file, reflection_file = list(info(iter(requests), timeout=5))
    names = {s.name for s in listed.list_services_response.service}
    assert {
        "durable_rpc.v1.WorkflowService",
        "durable_rpc.v1.WorkerService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    } <= names
    for reply, package in (
        (workflow_file, "durable_rpc.v1"),
        (reflection_file, "grpc.reflection.v1"),
    ):
        assert not reply.HasField("error_response"), reply.error_response
        protos = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in reply.file_descriptor_response.file_descriptor_proto
        ]
        assert package in {p.package for p in protos}


def cli(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("workflow", *args, address=server.address)


def test_cli_drives_a_run_with_tables_and_json(server: ServerProcess) -> None:
    started = cli(
        server,
        "start",
        "Greeter",
        "--id",
        "cli-1",
        "--task-queue",
        "q",
        "--input",
        '["Ada"]',
        "--json",
    )
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    described = cli(server, "describe", "cli-1", "--json")
    assert described.returncode == 0, described.stderr
    info = json.loads(described.stdout)
    assert info["run_id"] == run_id and info["status"] == "running"
    assert info["workflow_type"] == "Greeter"
    signalled = cli(server, "signal", "cli-1", "poke", "--request-id", "s1", "--json")
    again = cli(server, "signal", "cli-1", "poke", "--request-id", "s1", "--json")
    assert json.loads(signalled.stdout) == {"delivered": True}
    assert json.loads(again.stdout) == {"delivered": False}
    history = cli(server, "history", "cli-1", "--json")
    events = json.loads(history.stdout)["events"]
    kinds = [next(k for k in e if k not in ("eventId", "eventTime")) for e in events]
    assert kinds == ["workflowStarted", "signalReceived"]
    table = cli(server, "history", "cli-1")
    assert "workflow_started" in table.stdout and "signal_received" in table.stdout
    listed = cli(server, "list", "--status", "running", "--json")
    assert [r["workflow_id"] for r in json.loads(listed.stdout)] == ["cli-1"]
    assert cli(server, "terminate", "cli-1", "--reason", "done").returncode == 0
    result = cli(server, "result", "cli-1", "--timeout", "5")
    assert result.returncode == 2 and "terminated" in result.stderr
    missing = cli(server, "describe", "no-such-run")
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr


async def test_a_burst_of_concurrent_calls_is_served(client: Client) -> None:
    # Three times grpc's default limit of calls pending in its core (1,000), on one channel.
    async def start(index: int) -> str:
        handle = await client.start_workflow(
            "Greeter", "Ada", id=f"burst-{index}", task_queue="burst"
        )
        return handle.run_id

    run_ids = await asyncio.gather(*(start(index) for index in range(3000)))
    assert len(set(run_ids)) == 3000
