"""Malformed input is answered INVALID_ARGUMENT with a stable reason, never INTERNAL.

Cases found by fuzzing a real server, sent over a real socket to a server process (whose
log must stay free of tracebacks). The property-based fuzz of every RPC is in
test_fuzz_rpcs.py.
"""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from durable_rpc._rpc_status import reason_of
from durable_rpc.server._validate import MAX_CLEANUP_TIMEOUT_MS, MAX_IDENTIFIER_BYTES
from durable_rpc.store._session_options import MAX_SESSION_TTL_SECONDS
from durable_rpc.v1 import (
    options_pb2,
    payload_pb2,
    service_pb2,
    service_pb2_grpc,
    session_service_pb2,
    session_service_pb2_grpc,
)
from tests.e2e.conftest import ServerProcess


def call(server: ServerProcess, method: str, request: Message) -> grpc.RpcError:
    """The error ``method`` answers ``request`` with (the call must fail)."""
    service = "WorkflowService" if method in _WORKFLOW_METHODS else "WorkerService"
    with grpc.insecure_channel(server.address) as channel:
        stub = channel.unary_unary(
            f"/durable_rpc.v1.{service}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as info:
            stub(request, timeout=10)
    return info.value


_WORKFLOW_METHODS = {
    m.name for m in service_pb2.DESCRIPTOR.services_by_name["WorkflowService"].methods
}


def assert_invalid(error: grpc.RpcError, *, reason: str = "INVALID_ARGUMENT") -> str:
    assert isinstance(error, grpc.Call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert reason_of(error) == reason
    details = error.details() or ""
    assert len(details) < 2 * MAX_IDENTIFIER_BYTES
    return details


def assert_no_traceback(server: ServerProcess) -> None:
    log = server.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize(
    "field, value",
    [
        ("started_after", timestamp_pb2.Timestamp(seconds=0, nanos=-1)),
        ("started_after", timestamp_pb2.Timestamp(seconds=320_000_000_000)),
        ("started_before", timestamp_pb2.Timestamp(seconds=-320_000_000_000)),
        ("started_before", timestamp_pb2.Timestamp(seconds=1, nanos=1_000_000_000)),
    ],
)
def test_list_workflows_out_of_range_timestamp(
    server: ServerProcess, field: str, value: timestamp_pb2.Timestamp
) -> None:
    request = service_pb2.ListWorkflowsRequest()
    getattr(request, field).CopyFrom(value)
    details = assert_invalid(call(server, "ListWorkflows", request))
    assert field in details
    assert_no_traceback(server)


@pytest.mark.parametrize("token", [b"\xff\xfe", "١٢٣".encode(), b"9" * 40, b"-5"])
def test_list_workflows_foreign_page_token(server: ServerProcess, token: bytes) -> None:
    request = service_pb2.ListWorkflowsRequest(next_page_token=token)
    details = assert_invalid(call(server, "ListWorkflows", request))
    assert "next_page_token" in details
    assert_no_traceback(server)


@pytest.mark.parametrize("token", [b"\xff\xfe", "١٢٣".encode(), b"9" * 40, b"-5"])
def test_history_foreign_page_token(server: ServerProcess, token: bytes) -> None:
    request = service_pb2.GetWorkflowHistoryRequest(workflow_id="w", next_page_token=token)
    details = assert_invalid(call(server, "GetWorkflowHistory", request))
    assert "next_page_token" in details
    assert_no_traceback(server)


def test_out_of_range_duration(server: ServerProcess) -> None:
    request = service_pb2.StartWorkflowRequest(
        workflow_id="w",
        workflow_type="T",
        task_queue="q",
        execution_timeout=duration_pb2.Duration(seconds=1, nanos=-5),
    )
    details = assert_invalid(call(server, "StartWorkflow", request))
    assert "execution_timeout" in details
    request.execution_timeout.CopyFrom(duration_pb2.Duration(seconds=10**15))
    assert_invalid(call(server, "StartWorkflow", request))
    assert_no_traceback(server)


@pytest.mark.parametrize(
    "method, message",
    [
        ("DescribeWorkflow", service_pb2.DescribeWorkflowRequest(namespace="n" * 20_000)),
        ("StartWorkflow", service_pb2.StartWorkflowRequest(workflow_id="w" * 20_000)),
        ("SignalWorkflow", service_pb2.SignalWorkflowRequest(workflow_id="w", run_id="r" * 5000)),
        (
            "RegisterWorker",
            service_pb2.RegisterWorkerRequest(worker_id="w", task_queue="q", build_id="b" * 5000),
        ),
        (
            "FailActivityTask",
            service_pb2.FailActivityTaskRequest(
                lease=service_pb2.Lease(task_id=1, worker_id="w", fencing_token=1),
                failure=payload_pb2.Failure(message="m", type="t" * 5000),
            ),
        ),
    ],
    ids=["namespace", "workflow_id", "run_id", "build_id", "failure.type"],
)
def test_oversized_identifiers_are_refused_before_echo(
    server: ServerProcess, method: str, message: Message
) -> None:
    details = assert_invalid(call(server, method, message))
    assert f"{MAX_IDENTIFIER_BYTES}" in details
    assert_no_traceback(server)


def test_unknown_enum_value(server: ServerProcess) -> None:
    request = service_pb2.UpdateWorkflowRequest(
        workflow_id="w",
        update_name="u",
        wait_for=77,  # type: ignore[arg-type]
    )
    details = assert_invalid(call(server, "UpdateWorkflow", request))
    assert "wait_for" in details
    assert_no_traceback(server)


def test_non_finite_double(server: ServerProcess) -> None:
    request = service_pb2.StartWorkflowRequest(workflow_id="w", workflow_type="T", task_queue="q")
    request.search_attributes.indexed_fields["score"].double_value = float("nan")
    details = assert_invalid(call(server, "StartWorkflow", request))
    assert "double_value" in details
    assert_no_traceback(server)


@pytest.mark.parametrize("seconds", [315_576_000_000, MAX_CLEANUP_TIMEOUT_MS // 1000 + 1])
def test_cleanup_timeout_past_the_longest_is_refused(server: ServerProcess, seconds: int) -> None:
    """A cleanup deadline is recorded as a Timestamp (which ends at the year 9999): the
    longest Duration used to fail the cancellation with INTERNAL."""
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.WorkflowServiceStub(channel)
        stub.StartWorkflow(
            service_pb2.StartWorkflowRequest(workflow_id="w", workflow_type="T", task_queue="q"),
            timeout=10,
        )
        too_long = service_pb2.CancelWorkflowRequest(
            workflow_id="w", cleanup_timeout=duration_pb2.Duration(seconds=seconds)
        )
        with pytest.raises(grpc.RpcError) as info:
            stub.CancelWorkflow(too_long, timeout=10)
        details = assert_invalid(info.value, reason="INVALID_CLEANUP_TIMEOUT")
        assert "at most 366 days" in details
        longest = service_pb2.CancelWorkflowRequest(
            workflow_id="w",
            cleanup_timeout=duration_pb2.Duration(seconds=MAX_CLEANUP_TIMEOUT_MS // 1000),
        )
        stub.CancelWorkflow(longest, timeout=10)
    assert_no_traceback(server)


@pytest.mark.parametrize("ttl_seconds", [2**62, 253_402_300_799, MAX_SESSION_TTL_SECONDS + 1])
def test_session_ttl_past_the_longest_is_refused(server: ServerProcess, ttl_seconds: int) -> None:
    """A session's deadlines are answered as Timestamps and held in 64-bit ms columns: a
    TTL past either used to fail CreateWorkerSession with INTERNAL, after storing it."""
    with grpc.insecure_channel(server.address) as channel:
        service_pb2_grpc.WorkerServiceStub(channel).RegisterWorker(
            service_pb2.RegisterWorkerRequest(worker_id="w", task_queue="q", activities=["x"]),
            timeout=10,
        )
        stub = session_service_pb2_grpc.WorkerSessionServiceStub(channel)
        stub.RegisterWorkerSessions(
            session_service_pb2.RegisterWorkerSessionsRequest(
                worker_id="w", max_concurrent_worker_sessions=2
            ),
            timeout=10,
        )

        def create(session_id: str, ttl: int) -> session_service_pb2.WorkerSessionResponse:
            options = options_pb2.SessionOptions(
                session_id=session_id, ttl_seconds=ttl, lease_seconds=1
            )
            request = session_service_pb2.CreateWorkerSessionRequest(
                worker_id="w", task_queue="q", options=options
            )
            reply: session_service_pb2.WorkerSessionResponse = stub.CreateWorkerSession(
                request, timeout=10
            )
            return reply

        with pytest.raises(grpc.RpcError) as info:
            create("too-long", ttl_seconds)
        details = assert_invalid(info.value, reason="INVALID_SESSION_OPTIONS")
        assert f"at most {MAX_SESSION_TTL_SECONDS}" in details
        create("longest", MAX_SESSION_TTL_SECONDS)
        listed = stub.ListWorkerSessions(
            session_service_pb2.ListWorkerSessionsRequest(task_queue="q"), timeout=10
        )
        assert [s.session_id for s in listed.sessions] == ["longest"]
    assert_no_traceback(server)
