"""UpsertMemo in the store (on every backend): the keys merge into the run's memo in the
decision's transaction (a null value removes its key), describe and list show it at
once, the command event records it, continue-as-new carries the current memo, and a bad
upsert is refused."""

from __future__ import annotations

from typing import Any

import pytest

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.search_attributes import memo_from_proto, memo_to_proto
from durable_rpc.store import StartOptions, Store
from durable_rpc.v1 import payload_pb2, search_attributes_pb2, workflow_task_pb2
from tests.store.helpers import NS, QUEUE, claim, events, history, payload


def upsert(values: dict[str, Any]) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        upsert_memo=workflow_task_pb2.UpsertMemo(memo=memo_to_proto(values))
    )


def memo_of(data: bytes | None) -> dict[str, Any]:
    return memo_from_proto(search_attributes_pb2.Memo.FromString(data or b""))


async def start_with_memo(store: Store, memo: dict[str, Any] | None) -> None:
    await store.start_workflow(
        NS,
        "wf-1",
        "Order",
        "1",
        QUEUE,
        payload(b"args"),
        "req-1",
        options=StartOptions(memo=memo_to_proto(memo).SerializeToString() if memo else None),
    )


async def test_an_upsert_merges_and_removes_keys_and_shows_at_once(store: Store) -> None:
    await start_with_memo(store, {"a": 1, "b": "two"})
    task = await claim(store)
    await store.complete_workflow_task(
        NS, task.lease, len(task.events), [upsert({"b": 3, "c": [4], "a": None})]
    )
    described = await store.describe(NS, "wf-1", None)
    assert described.info.status == "running"
    assert memo_of(described.info.memo) == {"b": 3, "c": [4]}
    runs, _ = await store.list_runs(NS, None, None, None, None, 10, None, None)
    assert [memo_of(r.memo) for r in runs] == [{"b": 3, "c": [4]}]
    recorded = events(await history(store))[-1]
    assert recorded.HasField("memo_upserted")
    assert memo_from_proto(recorded.memo_upserted.memo) == {"b": 3, "c": [4], "a": None}


async def test_removing_every_key_leaves_no_memo(store: Store) -> None:
    await start_with_memo(store, {"a": 1})
    task = await claim(store)
    await store.complete_workflow_task(
        NS, task.lease, len(task.events), [upsert({"a": None, "never-set": None})]
    )
    assert memo_of((await store.describe(NS, "wf-1", None)).info.memo) == {}


async def test_a_run_without_a_memo_gets_one(store: Store) -> None:
    await start_with_memo(store, None)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [upsert({"x": True})])
    assert memo_of((await store.describe(NS, "wf-1", None)).info.memo) == {"x": True}


async def test_continue_as_new_carries_the_current_memo(store: Store) -> None:
    await start_with_memo(store, {"a": 1, "b": 2})
    task = await claim(store)
    cont = workflow_task_pb2.Command(
        continue_as_new=workflow_task_pb2.ContinueAsNew(input=payload_pb2.Payload(data=b"[]"))
    )
    await store.complete_workflow_task(
        NS, task.lease, len(task.events), [upsert({"a": None, "b": 5}), cont]
    )
    new = await store.describe(NS, "wf-1", None)
    assert new.info.run_id != task.run_id
    assert memo_of(new.info.memo) == {"b": 5}
    started = events(await history(store))[0].workflow_started
    assert memo_from_proto(started.memo) == {"b": 5}


@pytest.mark.parametrize(
    ("memo", "error", "match"),
    [
        (
            search_attributes_pb2.Memo(fields={"": payload_pb2.Payload(data=b"x")}),
            InvalidArgumentError,
            "memo keys must not be empty",
        ),
        (search_attributes_pb2.Memo(), InvalidArgumentError, "upsert_memo has no keys"),
    ],
)
async def test_a_bad_upsert_is_refused(
    store: Store, memo: search_attributes_pb2.Memo, error: type[Exception], match: str
) -> None:
    await start_with_memo(store, {"a": 1})
    task = await claim(store)
    command = workflow_task_pb2.Command(upsert_memo=workflow_task_pb2.UpsertMemo(memo=memo))
    with pytest.raises(error, match=match):
        await store.complete_workflow_task(NS, task.lease, len(task.events), [command])
    assert memo_of((await store.describe(NS, "wf-1", None)).info.memo) == {"a": 1}
