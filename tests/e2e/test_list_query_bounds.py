"""A huge list query is refused at once and never stalls the server for other callers.

Against a real server process: a 2 MB ListWorkflows query and eight concurrent ~800 KB
ones (40,000 AND-ed comparisons) are answered INVALID_ARGUMENT with a stable reason
within moments, while DescribeWorkflow calls sent meanwhile stay fast and the health
check stays SERVING. The bounds themselves on every store backend:
tests/store/test_query_bounds.py.
"""

from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from durable_rpc._rpc_status import reason_of
from durable_rpc.store._search import MAX_QUERY_TERMS
from durable_rpc.v1 import service_pb2, service_pb2_grpc
from tests.e2e.conftest import ServerProcess

#: What the refused queries must be answered within (they took tens of seconds).
PROMPT_S = 5.0
#: Longest a DescribeWorkflow may take while the huge queries are in flight.
DESCRIBE_MAX_S = 0.1
#: Room for the huge requests themselves (the server accepts 4 MB messages).
CHANNEL_OPTIONS = [("grpc.max_send_message_length", 8 << 20)]


def _and_ed(count: int) -> str:
    return " AND ".join(f"A{i:05d} = {i:06d}" for i in range(count))


def _assert_refused(call: grpc.Future, reason: str) -> None:
    error = call.exception(timeout=PROMPT_S)
    assert isinstance(error, grpc.Call), error
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (error.code(), error.details())
    assert reason_of(error) == reason, error.details()


def test_huge_queries_are_refused_promptly_without_stalling_other_calls(
    server: ServerProcess,
) -> None:
    huge = 'WorkflowType = "' + "x" * (2 * 1024 * 1024) + '"'
    many_terms = _and_ed(40_000)
    assert len(many_terms) > 750_000
    with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as channel:
        stub = service_pb2_grpc.WorkflowServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        stub.StartWorkflow(
            service_pb2.StartWorkflowRequest(
                workflow_id="wf", workflow_type="Order", task_queue="q"
            ),
            timeout=10,
        )
        describe = service_pb2.DescribeWorkflowRequest(workflow_id="wf")
        stub.DescribeWorkflow(describe, timeout=10)  # the channel is connected and warm

        calls = [stub.ListWorkflows.future(service_pb2.ListWorkflowsRequest(query=huge))]
        calls += [
            stub.ListWorkflows.future(service_pb2.ListWorkflowsRequest(query=many_terms))
            for _ in range(8)
        ]
        slowest = 0.0
        for _ in range(20):
            started = time.monotonic()
            stub.DescribeWorkflow(describe, timeout=2 * PROMPT_S)
            slowest = max(slowest, time.monotonic() - started)
            reply = health.Check(health_pb2.HealthCheckRequest(), timeout=2 * PROMPT_S)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        for call in calls:
            _assert_refused(call, "QUERY_TOO_LARGE")
        assert slowest < DESCRIBE_MAX_S, f"DescribeWorkflow took {slowest * 1000:.0f} ms"

        # The same bound serves counts and batches; one comparison too many is refused too.
        _assert_refused(
            stub.CountWorkflows.future(service_pb2.CountWorkflowsRequest(query=huge)),
            "QUERY_TOO_LARGE",
        )
        _assert_refused(
            stub.CountWorkflows.future(
                service_pb2.CountWorkflowsRequest(query=_and_ed(MAX_QUERY_TERMS + 1))
            ),
            "QUERY_TOO_COMPLEX",
        )
        batch = stub.BatchWorkflows(
            service_pb2.BatchWorkflowsRequest(query=many_terms, batch_id="b", terminate_reason="r"),
            timeout=PROMPT_S,
        )
        try:
            list(batch)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
            assert reason_of(error) == "QUERY_TOO_LARGE"
        else:
            raise AssertionError("the batch with a huge query was not refused")
        counts = stub.CountWorkflows(
            service_pb2.CountWorkflowsRequest(query=_and_ed(MAX_QUERY_TERMS)), timeout=10
        )
        assert counts.total == 0
    assert "Traceback" not in server.log_path.read_text()
