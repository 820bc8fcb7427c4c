"""Definitions as an operator sees them: list with what references each, remove only
when nothing does, refuse a removed one at registration and at start until restored."""

from __future__ import annotations

import pytest

from durable_rpc.errors import DefinitionInUseError, DefinitionRemovedError, NotFoundError
from durable_rpc.store import DefinitionRecord, Store
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    claim,
    events,
    fail_workflow,
    history,
    schedule,
    start,
    wait_db_time,
)


async def register(store: Store, worker: str, *names: str) -> None:
    definitions = [(name, "1", f"fp-{name}") for name in names]
    await store.register_worker(NS, worker, QUEUE, definitions, ["act"], "", False)


async def definition(store: Store, name: str) -> DefinitionRecord:
    (record,) = [d for d in await store.list_definitions(NS) if d.name == name]
    return record


async def decide(store: Store, worker: str, *commands: workflow_task_pb2.Command) -> None:
    task = await claim(store, worker)
    await store.complete_workflow_task(NS, task.lease, len(task.events), list(commands))


async def test_list_counts_live_workers_and_runs_by_workflow_task_state(store: Store) -> None:
    await register(store, "w1", "Order", "Other")
    await register(store, "w2", "Order")
    # Oldest first: each claim below takes the oldest queued task.
    await start(store, "failed")
    await decide(store, "w1", fail_workflow(1))
    await start(store, "waiting")
    await decide(store, "w1", schedule(1))  # an activity runs: no workflow task due
    await start(store, "recoverable")
    expired = await claim(store, "w1", lease_ms=50)
    await start(store, "leased")
    await claim(store, "w2")
    await start(store, "queued")
    await wait_db_time(store, expired.lease_expires_at_ms + 1)

    records = await store.list_definitions(NS)
    assert [(d.name, d.version) for d in records] == [("Order", "1"), ("Other", "1")]
    order, other = records
    assert order.fingerprint == "fp-Order" and order.removed_at_ms is None
    assert order.live_worker_ids == ("w1", "w2")
    assert (
        order.queued_runs,
        order.leased_runs,
        order.recoverable_runs,
        order.waiting_runs,
        order.failed_runs,
    ) == (1, 1, 1, 1, 1)
    assert other.live_worker_ids == ("w1",) and other.open_runs == 0


async def test_removal_is_refused_while_anything_references_the_definition(
    store: Store,
) -> None:
    await register(store, "w1", "Order")
    await start(store, "open")
    with pytest.raises(DefinitionInUseError) as refused:
        await store.remove_definition(NS, "Order", "1")
    message = str(refused.value)
    assert "live workers register it (w1)" in message
    assert "1 open runs reference it (1 queued, 0 leased, 0 recoverable, 0 waiting)" in message
    await store.deregister_worker(NS, "w1")
    with pytest.raises(DefinitionInUseError, match="1 open runs reference it") as refused:
        await store.remove_definition(NS, "Order", "1")
    assert "live workers" not in str(refused.value)
    assert (await definition(store, "Order")).removed_at_ms is None
    await store.terminate(NS, "open", None, "done with it")

    removed = await store.remove_definition(NS, "Order", "")  # '' is the default version
    assert removed.removed_at_ms is not None and removed.open_runs == 0
    again = await store.remove_definition(NS, "Order", "1")
    assert again.removed_at_ms == removed.removed_at_ms
    assert (await definition(store, "Order")).removed_at_ms == removed.removed_at_ms


async def test_a_removed_definition_is_refused_until_restored(store: Store) -> None:
    await register(store, "w1", "Order")
    await store.deregister_worker(NS, "w1")
    await store.remove_definition(NS, "Order", "1")
    with pytest.raises(DefinitionRemovedError) as refused:
        await register(store, "w1", "Order")
    assert str(refused.value) == (
        "DEFINITION_REMOVED: workflow ('Order', version '1') was removed by an operator, "
        "so it cannot be registered until it is restored: "
        "durable-rpc definition restore Order --version 1"
    )
    # Nothing of the refused registration is kept.
    assert (await definition(store, "Order")).live_worker_ids == ()
    # A start is refused too (with a request id: PostgreSQL's hot path; without one: the
    # general path), and leaves no run.
    for request_id in ("req-1", ""):
        with pytest.raises(DefinitionRemovedError, match="cannot be started"):
            await start(store, "wf-1", workflow_type="Order", request_id=request_id)
    with pytest.raises(NotFoundError):
        await store.describe(NS, "wf-1", None)

    restored = await store.restore_definition(NS, "Order", "1")
    assert restored.removed_at_ms is None
    assert (await store.restore_definition(NS, "Order", "1")).removed_at_ms is None
    await register(store, "w1", "Order")
    await start(store, "wf-1", workflow_type="Order")
    assert (await definition(store, "Order")).queued_runs == 1


async def test_a_child_of_a_removed_definition_fails_to_start(store: Store) -> None:
    await register(store, "w1", "Kid")
    await store.deregister_worker(NS, "w1")
    await store.remove_definition(NS, "Kid", "1")
    await start(store, "parent")
    spec = workflow_task_pb2.StartChildWorkflow(
        workflow_type="Kid", workflow_id="kid", input=payload_pb2.Payload(data=b"[]")
    )
    task = await claim(store)
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [workflow_task_pb2.Command(seq=1, start_child_workflow=spec)],
    )
    failed = events(await history(store, "parent"))[-1].child_workflow_start_failed
    assert (failed.seq, failed.reason) == (1, "DEFINITION_REMOVED")
    with pytest.raises(NotFoundError):
        await store.describe(NS, "kid", None)


async def test_unknown_definitions_are_not_found(store: Store) -> None:
    for operation in (store.remove_definition, store.restore_definition):
        with pytest.raises(NotFoundError, match="never registered"):
            await operation(NS, "Nope", "1")
    assert await store.list_definitions(NS) == []
