"""CountWorkflows against a real server process over gRPC: the counts by status of the
runs ListWorkflows would list for the same filter, its refusal of a bad query, and the
CLI's ``workflow count``."""

from __future__ import annotations

import json

import pytest

from durable_rpc import Client
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.v1 import service_pb2
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ServerProcess

pytestmark = pytest.mark.timeout(120)

QUERY = 'WorkflowType = "Counted" AND Region = "eu"'


async def _start_runs(client: Client) -> None:
    """12 Counted runs (8 in eu, 3 of them terminated), 4 others in eu; no worker, so
    the rest stay running."""
    for i in range(12):
        await client.start_workflow(
            "Counted",
            id=f"counted-{i}",
            task_queue="count-q",
            search_attributes={"Region": "eu" if i < 8 else "us"},
        )
    for i in range(4):
        await client.start_workflow(
            "Other", id=f"other-{i}", task_queue="count-q", search_attributes={"Region": "eu"}
        )
    for i in (0, 1, 2):
        await client.get_handle(f"counted-{i}").terminate("counted")


async def test_counts_are_the_listed_runs_by_status(client: Client) -> None:
    await _start_runs(client)

    counts = await client.count_workflows(QUERY)

    assert dict(counts.by_status) == {"running": 5, "terminated": 3}
    assert counts.total == 8 and counts["failed"] == 0
    listed = [info.status async for info in client.list_workflows(QUERY, page_size=3)]
    assert sorted(listed) == ["running"] * 5 + ["terminated"] * 3
    running = await client.count_workflows(
        QUERY, status=service_pb2.WORKFLOW_STATUS_RUNNING, workflow_type="Counted"
    )
    assert (dict(running.by_status), running.total) == ({"running": 5}, 5)
    everything = await client.count_workflows()
    assert (everything["running"], everything["terminated"], everything.total) == (13, 3, 16)
    # The wire form: one entry per status present, in WorkflowStatus order.
    reply = await client.call(
        client.workflow_service.CountWorkflows,
        service_pb2.CountWorkflowsRequest(namespace=client.namespace, query=QUERY),
    )
    assert [(c.status, c.count) for c in reply.counts] == [
        (service_pb2.WORKFLOW_STATUS_RUNNING, 5),
        (service_pb2.WORKFLOW_STATUS_TERMINATED, 3),
    ]


async def test_a_bad_query_is_refused_with_the_lists_reason(client: Client) -> None:
    bad = 'WorkflowType = "Counted" OR Region = "eu"'
    with pytest.raises(InvalidArgumentError) as counted:
        await client.count_workflows(bad)
    with pytest.raises(InvalidArgumentError) as listed:
        [info async for info in client.list_workflows(bad)]
    assert counted.value.reason == listed.value.reason == "INVALID_ARGUMENT"
    assert str(counted.value) == str(listed.value)
    assert "invalid query" in str(counted.value)


async def test_cli_workflow_count(server: ServerProcess, client: Client) -> None:
    await _start_runs(client)
    as_json = await run_cli_async(
        "workflow", "count", "--query", QUERY, "--json", address=server.address
    )
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {
        "by_status": {"running": 5, "terminated": 3},
        "total": 8,
    }
    plain = await run_cli_async(
        "workflow", "count", "--status", "terminated", "--type", "Counted", address=server.address
    )
    assert plain.returncode == 0, plain.stderr
    lines = [line.split() for line in plain.stdout.splitlines()]
    assert ["│", "terminated", "│", "3", "│"] in lines and ["│", "total", "│", "3", "│"] in lines
    refused = await run_cli_async("workflow", "count", "-q", "Nope ~ 1", address=server.address)
    assert refused.returncode == 1
    assert "invalid query" in refused.stderr and "Traceback" not in refused.stderr
