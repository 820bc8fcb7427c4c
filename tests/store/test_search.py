"""Memo, search attributes, list queries and workflow timeouts (both backends)."""

from __future__ import annotations

import asyncio

import pytest

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.search_attributes import memo_to_proto, to_proto
from durable_rpc.store import StartOptions, Store
from durable_rpc.v1 import history_pb2, search_attributes_pb2, workflow_task_pb2
from tests.store.helpers import NS, QUEUE, payload


def opts(attrs: dict[str, object], **kw: object) -> StartOptions:
    return StartOptions(search_attributes=to_proto(attrs).SerializeToString(), **kw)  # type: ignore[arg-type]


async def ids(store: Store, query: str, limit: int = 1) -> list[str]:
    out: list[str] = []
    cursor: str | None = None
    while True:
        runs, cursor = await store.list_runs(NS, None, None, None, None, limit, cursor, query)
        out += [r.workflow_id for r in runs]
        if cursor is None:
            return out


async def test_search_attributes_filter_and_page(store: Store) -> None:
    memo = memo_to_proto({"note": "vip"}).SerializeToString()
    for i in range(5):
        await store.start_workflow(
            NS,
            f"wf-{i}",
            "Order" if i % 2 == 0 else "Refund",
            "",
            QUEUE,
            payload(b"a"),
            f"r-{i}",
            options=StartOptions(
                memo=memo,
                search_attributes=to_proto(
                    {"CustomerId": f"c-{i % 2}", "Amount": i * 100, "Vip": i == 4}
                ).SerializeToString(),
            ),
        )
    assert await ids(store, 'CustomerId = "c-0"') == ["wf-4", "wf-2", "wf-0"]
    assert await ids(store, 'CustomerId = "c-0" AND Amount > 100') == ["wf-4", "wf-2"]
    assert await ids(store, "Amount >= 150.5 AND Amount < 400") == ["wf-3", "wf-2"]
    assert await ids(store, 'WorkflowType = "Refund" AND Status = "running"') == ["wf-3", "wf-1"]
    assert await ids(store, "Vip = true") == ["wf-4"]
    assert await ids(store, 'StartTime > "2000-01-01T00:00:00Z" AND Missing = 1') == []
    assert await ids(store, "CustomerId = 'c-1' AND Amount != 100") == ["wf-3"]
    description = await store.describe(NS, "wf-4", None)
    assert description.info.memo == memo
    attrs = search_attributes_pb2.SearchAttributes.FromString(
        description.info.search_attributes or b""
    )
    assert attrs.indexed_fields["Amount"].int_value == 400
    for bad in ["Amount >", "Amount = 1 OR x = 2", 'Status = "nope"', "StartTime > 5", "x = $"]:
        with pytest.raises(InvalidArgumentError, match="invalid query"):
            await ids(store, bad)


async def test_bad_search_attribute_types_are_refused(store: Store) -> None:
    wrong = search_attributes_pb2.SearchAttributes()
    wrong.indexed_fields["X"].type = "int"
    wrong.indexed_fields["X"].string_value = "1"
    unknown = search_attributes_pb2.SearchAttributes()
    unknown.indexed_fields["X"].type = "money"
    unknown.indexed_fields["X"].int_value = 1
    for attrs, message in ((wrong, "needs int_value"), (unknown, "unknown type")):
        with pytest.raises(InvalidArgumentError, match=message):
            await store.start_workflow(
                NS,
                "wf",
                "Order",
                "",
                QUEUE,
                payload(b"a"),
                "r",
                options=StartOptions(search_attributes=attrs.SerializeToString()),
            )


async def test_upsert_command_is_recorded_and_indexed(store: Store) -> None:
    await store.start_workflow(
        NS, "wf-1", "Order", "", QUEUE, payload(b"a"), "r", options=opts({"Stage": "new"})
    )
    task = await store.claim_workflow_task(NS, QUEUE, "w1", 30_000)
    assert task is not None
    command = workflow_task_pb2.Command(
        upsert_search_attributes=workflow_task_pb2.UpsertSearchAttributes(
            search_attributes=to_proto({"Stage": "paid"})
        )
    )
    await store.complete_workflow_task(NS, task.lease, 1, [command])
    assert await ids(store, 'Stage = "paid"') == ["wf-1"]
    assert await ids(store, 'Stage = "new"') == []
    page = await store.get_history(NS, "wf-1", None, 0, 100)
    kinds = [history_pb2.HistoryEvent.FromString(e).WhichOneof("attributes") for e in page.events]
    assert kinds[-1] == "search_attributes_upserted"


async def test_execution_timeout_closes_the_run(store: Store) -> None:
    await store.start_workflow(
        NS,
        "wf-1",
        "Order",
        "",
        QUEUE,
        payload(b"a"),
        "r",
        options=StartOptions(execution_timeout_ms=50, run_timeout_ms=60_000),
    )
    report = await store.process_due()
    assert report.next_due_ms is not None
    for _ in range(100):
        await asyncio.sleep(0.02)
        await store.process_due()
        outcome = await store.get_outcome(NS, "wf-1", None)
        if outcome.status != "running":
            break
    assert outcome.status == "timed_out"
    assert await store.claim_workflow_task(NS, QUEUE, "w1", 30_000) is None
    page = await store.get_history(NS, "wf-1", None, 0, 100)
    last = history_pb2.HistoryEvent.FromString(page.events[-1])
    assert last.workflow_timed_out.timeout_kind == "execution"
    with pytest.raises(InvalidArgumentError):
        await store.start_workflow(
            NS,
            "wf-2",
            "Order",
            "",
            QUEUE,
            payload(b"a"),
            "r2",
            options=StartOptions(run_timeout_ms=-1),
        )
