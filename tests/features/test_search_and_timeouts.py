"""Memo, typed search attributes, list queries and workflow timeouts on a real server."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from durable_rpc import Client
from durable_rpc.client import WorkflowTimedOutError
from durable_rpc.errors import InvalidArgumentError
from tests.cli_process import checked, run_cli_async
from tests.e2e.conftest import ServerProcess
from tests.features import apps
from tests.features.conftest import FeatureWorker

pytestmark = pytest.mark.timeout(120)


async def _ids(client: Client, query: str) -> list[str]:
    return [info.workflow_id async for info in client.list_workflows(query, page_size=1)]


async def test_memo_search_attributes_upsert_and_list_queries(
    client: Client, worker: FeatureWorker, queue: str, server: ServerProcess
) -> None:
    handle = await client.start_workflow(
        apps.Tagged.run,
        id="tagged-1",
        task_queue=queue,
        memo={"note": "vip"},
        search_attributes={"CustomerId": "c-1", "Amount": 50},
    )
    other = await client.start_workflow(
        apps.Tagged.run,
        id="tagged-2",
        task_queue=queue,
        search_attributes={"CustomerId": "c-2", "Amount": 500},
    )
    description = await handle.describe()
    assert description.info.memo == {"note": "vip"}
    assert description.info.search_attributes == {"CustomerId": "c-1", "Amount": 50}

    assert await _ids(client, 'CustomerId = "c-1"') == ["tagged-1"]
    assert await _ids(client, "Amount > 100") == ["tagged-2"]
    assert await _ids(client, 'WorkflowType = "Tagged" AND Status = "running"') == [
        "tagged-2",
        "tagged-1",
    ]

    await handle.signal(apps.Tagged.advance, "paid")
    for _ in range(100):
        if await _ids(client, 'Stage = "paid" AND Amount >= 250') == ["tagged-1"]:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the upserted search attributes never became visible to list queries")
    await handle.signal(apps.Tagged.advance, "done")
    result = await handle.result(timeout=30)
    assert result == {
        "memo": {"note": "vip"},
        "before": ["Amount", "CustomerId"],
        "after": {"Amount": "250", "CustomerId": "c-1", "Stage": "paid"},
    }
    history = [e.WhichOneof("attributes") for e in await handle.history()]
    assert history.count("search_attributes_upserted") == 1

    with pytest.raises(InvalidArgumentError, match="invalid query"):
        await _ids(client, "Amount >")
    await other.terminate("done")

    # The CLI: list with a search-attribute filter, as JSON.
    out = checked(
        await run_cli_async(
            "workflow",
            "list",
            "--address",
            server.address,
            "--query",
            'CustomerId = "c-1"',
            "--json",
        )
    )
    rows = json.loads(out)
    assert [row["workflow_id"] for row in rows] == ["tagged-1"]
    assert rows[0]["search_attributes"]["CustomerId"] == "c-1"


async def test_execution_timeout_closes_the_run_as_timed_out(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.start_workflow(
        apps.Tagged.run,
        id="tagged-timeout",
        task_queue=queue,
        execution_timeout=timedelta(milliseconds=500),
    )
    with pytest.raises(WorkflowTimedOutError):
        await handle.result(timeout=30)
    description = await handle.describe()
    assert description.info.status == "timed_out"
    history = [e.WhichOneof("attributes") for e in await handle.history()]
    assert history[-1] == "workflow_timed_out"


async def test_wrong_search_attribute_type_is_invalid_argument(client: Client, queue: str) -> None:
    from durable_rpc.v1 import search_attributes_pb2, service_pb2

    request = service_pb2.StartWorkflowRequest(
        namespace="default", workflow_id="bad", workflow_type="Tagged", task_queue=queue
    )
    request.search_attributes.indexed_fields["X"].CopyFrom(
        search_attributes_pb2.SearchAttributeValue(type="int", string_value="nope")
    )
    with pytest.raises(InvalidArgumentError, match="needs int_value"):
        await client.call(client.workflow_service.StartWorkflow, request)
    request.search_attributes.indexed_fields["X"].CopyFrom(
        search_attributes_pb2.SearchAttributeValue(type="money", int_value=1)
    )
    with pytest.raises(InvalidArgumentError, match="unknown type"):
        await client.call(client.workflow_service.StartWorkflow, request)
