"""Retention in the store: closed runs past their namespace's retention are deleted with
every row of them, in bounded batches, each run judged by its own close time, only by
the holder of the 'retention' maintenance lease (database clock)."""

from __future__ import annotations

import asyncio

import pytest

from durable_rpc.errors import InvalidArgumentError, LeaseLostError, NotFoundError
from durable_rpc.store import StartOptions, Store
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import payload_pb2, search_attributes_pb2, workflow_task_pb2
from tests.store.conftest import Backend
from tests.store.helpers import NS, QUEUE, claim, payload, schedule, start, wait_db_time
from tests.store.schema_rows import rows_of

JOB = "retention"
OWNER = "replica-a"
SHORT_MS = 300


async def closed_run(store: Store, workflow_id: str) -> str:
    """A run with rows in most per-run tables: search attributes, a signal, an activity
    task, a workflow task, start request; then terminated."""
    attrs = search_attributes_pb2.SearchAttributes()
    attrs.indexed_fields["Customer"].type = "keyword"
    attrs.indexed_fields["Customer"].string_value = "c-1"
    result = await store.start_workflow(
        NS,
        workflow_id,
        "Order",
        "1",
        QUEUE,
        payload(b"args"),
        f"req-{workflow_id}",
        options=StartOptions(search_attributes=attrs.SerializeToString()),
    )
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [schedule(1)])
    assert await store.signal_workflow(
        NS, workflow_id, None, "go", payload(b"s"), f"s-{workflow_id}"
    )
    await store.terminate(NS, workflow_id, None, "done")
    return result.run_id


async def sweep(store: Store, owner: str = OWNER, limit: int = 500) -> int:
    assert await store.take_maintenance_lease(JOB, owner, 30_000)
    batch = await store.delete_expired_runs(owner, limit, 1_000)
    return batch.deleted


async def test_expired_runs_are_deleted_with_every_row_of_them(
    store: Store, backend: Backend
) -> None:
    await store.update_namespace(NS, None, SHORT_MS)
    await store.create_namespace("keep", "", 7 * 86_400_000)
    old = await closed_run(store, "old")
    open_run = await start(store, "open")
    young = await store.start_workflow("keep", "young", "Order", "1", QUEUE, payload(b"a"), "r-y")
    await store.terminate("keep", "young", None, "done")
    before = await rows_of(store, backend.name == "postgres", [old])
    assert {"runs", "history", "tasks", "signal_requests", "search_attributes"} <= set(before)
    closed_at = (await store.describe(NS, "old", old)).info.close_time_ms
    assert closed_at is not None
    kept_before = await rows_of(store, backend.name == "postgres", [open_run, young.run_id])

    await wait_db_time(store, closed_at + SHORT_MS + 1)
    assert await sweep(store) == 1

    assert await rows_of(store, backend.name == "postgres", [old]) == {}
    with pytest.raises(NotFoundError):
        await store.describe(NS, "old", old)
    with pytest.raises(NotFoundError):
        await store.get_history(NS, "old", old, 0, 100)
    assert await rows_of(store, backend.name == "postgres", [open_run, young.run_id]) == kept_before
    assert (await store.describe(NS, "open", None)).info.status == "running"
    assert (await store.describe("keep", "young", None)).info.status == "terminated"
    # The workflow id is free of its past: a start with the old request id is a new run.
    again = await store.start_workflow(NS, "old", "Order", "1", QUEUE, payload(b"a"), "req-old")
    assert again.started and again.run_id != old


async def test_each_run_of_a_chain_is_judged_by_its_own_close_time(store: Store) -> None:
    await store.update_namespace(NS, None, SHORT_MS)
    first = await start(store, "chain")
    task = await claim(store)
    again = workflow_task_pb2.Command(
        seq=1,
        continue_as_new=workflow_task_pb2.ContinueAsNew(input=payload_pb2.Payload(data=b"n")),
    )
    await store.complete_workflow_task(NS, task.lease, len(task.events), [again])
    second = (await store.describe(NS, "chain", None)).info
    assert second.run_id != first and second.status == "running"
    closed_at = (await store.describe(NS, "chain", first)).info.close_time_ms
    assert closed_at is not None
    await wait_db_time(store, closed_at + SHORT_MS + 1)

    assert await sweep(store) == 1
    with pytest.raises(NotFoundError):
        await store.describe(NS, "chain", first)
    # The open continuation is untouched, and it still closes normally.
    task = await claim(store)
    assert task.run_id == second.run_id
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [
            workflow_task_pb2.Command(
                seq=1,
                complete_workflow=workflow_task_pb2.CompleteWorkflow(
                    result=payload_pb2.Payload(data=b"r")
                ),
            )
        ],
    )
    assert (await store.describe(NS, "chain", None)).info.status == "completed"


async def test_a_batch_deletes_at_most_its_limit(store: Store) -> None:
    await store.update_namespace(NS, None, SHORT_MS)
    for i in range(5):
        await start(store, f"wf-{i}")
        await store.terminate(NS, f"wf-{i}", None, "done")
    last = (await store.describe(NS, "wf-4", None)).info.close_time_ms
    assert last is not None
    await wait_db_time(store, last + SHORT_MS + 1)
    assert await store.take_maintenance_lease(JOB, OWNER, 30_000)
    batches = [await store.delete_expired_runs(OWNER, 2, 1_000) for _ in range(4)]
    assert [(b.deleted, b.more) for b in batches] == [(2, True), (2, True), (1, False), (0, False)]
    # Oldest first.
    with pytest.raises(NotFoundError):
        await store.describe(NS, "wf-0", None)
    with pytest.raises(InvalidArgumentError):
        await store.delete_expired_runs(OWNER, 0, 1_000)


async def test_only_the_lease_holder_deletes(store: Store) -> None:
    await store.update_namespace(NS, None, 1)
    await start(store, "wf-1")
    await store.terminate(NS, "wf-1", None, "done")
    with pytest.raises(LeaseLostError):
        await store.delete_expired_runs(OWNER, 10, 1_000)  # nobody took it
    assert await store.take_maintenance_lease(JOB, OWNER, 200)
    assert not await store.take_maintenance_lease(JOB, "replica-b", 200)
    assert await store.take_maintenance_lease(JOB, OWNER, 200)  # renewed by its holder
    with pytest.raises(LeaseLostError):
        await store.delete_expired_runs("replica-b", 10, 1_000)
    assert (await store.describe(NS, "wf-1", None)).info.status == "terminated"
    # Expired by the database clock: another replica takes it over, the old holder is out.
    now = await store.now_ms()
    await wait_db_time(store, now + 201)
    assert await store.take_maintenance_lease(JOB, "replica-b", 200)
    with pytest.raises(LeaseLostError):
        await store.delete_expired_runs(OWNER, 10, 1_000)
    assert (await store.delete_expired_runs("replica-b", 10, 1_000)).deleted == 1
    # Released: the next replica need not wait for the expiry.
    await store.release_maintenance_lease(JOB, OWNER)  # not the holder: no effect
    assert not await store.take_maintenance_lease(JOB, OWNER, 200)
    await store.release_maintenance_lease(JOB, "replica-b")
    assert await store.take_maintenance_lease(JOB, OWNER, 200)


async def test_replicas_racing_for_the_lease_get_one_holder(durable_backend: Backend) -> None:
    """Two stores on one database (two replicas): of many concurrent takes of a free
    lease, exactly one owner wins, and only it may delete."""
    stores = [durable_backend.make(), durable_backend.make()]
    for s in stores:
        await s.open()
    try:
        wins = await asyncio.gather(
            *(
                stores[i % 2].take_maintenance_lease(JOB, f"replica-{i % 2}", 30_000)
                for i in range(20)
            )
        )
        winners = {f"replica-{i % 2}" for i, won in enumerate(wins) if won}
        assert len(winners) == 1
        (winner,) = winners
        loser = "replica-1" if winner == "replica-0" else "replica-0"
        assert all(won for i, won in enumerate(wins) if f"replica-{i % 2}" == winner)
        await stores[0].delete_expired_runs(winner, 10, 1_000)
        with pytest.raises(LeaseLostError):
            await stores[1].delete_expired_runs(loser, 10, 1_000)
    finally:
        for s in stores:
            await s.close()


async def test_a_batch_is_bounded_in_history_events_too(store: Store, backend: Backend) -> None:
    """Runs of 4 events (started, 2 signals, terminated) and a budget of 10 events: two
    runs a batch; a run of 14 events loses its newest 10 first and goes with the rest."""
    await store.update_namespace(NS, None, SHORT_MS)
    big = await start(store, "big")
    for i in range(12):
        assert await store.signal_workflow(NS, "big", None, "s", payload(b"x"), f"big-{i}")
    await store.terminate(NS, "big", None, "done")
    small = []
    for i in range(3):
        small.append(await start(store, f"small-{i}"))
        for s in range(2):
            await store.signal_workflow(NS, f"small-{i}", None, "s", payload(b"x"), f"{i}-{s}")
        await store.terminate(NS, f"small-{i}", None, "done")
    assert (await store.describe(NS, "big", None)).info.history_length == 14
    last = (await store.describe(NS, "small-2", None)).info.close_time_ms
    assert last is not None
    await wait_db_time(store, last + SHORT_MS + 1)
    assert await store.take_maintenance_lease(JOB, OWNER, 30_000)

    # The big run closed first: its newest 10 events go alone.
    first = await store.delete_expired_runs(OWNER, 100, max_events=10)
    assert (first.deleted, first.more) == (0, True)
    left = await store.get_history(NS, "big", big, 0, 100)
    assert len(left.events) == 4
    assert (await store.describe(NS, "big", big)).info.history_length == 4
    batches = [await store.delete_expired_runs(OWNER, 100, max_events=10) for _ in range(3)]
    # 4 (big) + 4 (small-0) fit 10, small-1's 4 more would not; then small-1 and small-2.
    assert [(b.deleted, b.more) for b in batches] == [(2, True), (2, False), (0, False)]
    postgres = backend.name == "postgres"
    assert await rows_of(store, postgres, [big, *small]) == {}


async def test_a_parent_and_its_child_are_judged_apart(store: Store) -> None:
    """An expired parent goes while its abandoned child runs on; the child then closes
    normally (nobody left to tell) and goes by its own close time."""
    await store.update_namespace(NS, None, SHORT_MS)
    parent = await start(store, "parent")
    task = await claim(store)
    spec = workflow_task_pb2.StartChildWorkflow(
        workflow_type="Kid",
        workflow_id="kid",
        input=payload_pb2.Payload(data=b"[]"),
        parent_close_policy="ABANDON",
    )
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [workflow_task_pb2.Command(seq=1, start_child_workflow=spec)],
    )
    await store.terminate(NS, "parent", None, "done")
    closed_at = (await store.describe(NS, "parent", parent)).info.close_time_ms
    assert closed_at is not None
    await wait_db_time(store, closed_at + SHORT_MS + 1)

    assert await sweep(store) == 1
    with pytest.raises(NotFoundError):
        await store.describe(NS, "parent", parent)
    kid = (await store.describe(NS, "kid", None)).info
    assert kid.status == "running"
    task = await claim(store)
    assert task.run_id == kid.run_id
    done = workflow_task_pb2.Command(
        seq=1,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(result=payload_pb2.Payload(data=b"r")),
    )
    await store.complete_workflow_task(NS, task.lease, len(task.events), [done])
    closed = (await store.describe(NS, "kid", None)).info
    assert closed.status == "completed" and closed.close_time_ms is not None
    await wait_db_time(store, closed.close_time_ms + SHORT_MS + 1)
    assert await sweep(store) == 1
    with pytest.raises(NotFoundError):
        await store.describe(NS, "kid", None)


async def test_workers_silent_longer_than_the_retention_are_deleted(store: Store) -> None:
    await store.update_namespace(NS, None, SHORT_MS)
    await store.register_worker(NS, "gone", QUEUE, [("Order", "1", "fp")], ["act"], "", False)
    await store.register_worker(NS, "live", QUEUE, [("Order", "1", "fp")], ["act"], "", False)
    assert await store.take_maintenance_lease(JOB, OWNER, 30_000)
    assert await store.delete_gone_workers(OWNER, 100) == 0  # both heard from just now
    await wait_db_time(store, await store.now_ms() + SHORT_MS + 1)
    await store.worker_heartbeat(NS, "live")
    with pytest.raises(LeaseLostError):
        await store.delete_gone_workers("replica-b", 100)
    assert await store.delete_gone_workers(OWNER, 100) == 1

    workers = await store.list_workers(NS, None, include_dead=True)
    assert [w.worker_id for w in workers] == ["live"]
    for table in ("workers", "worker_definitions", "worker_activities"):
        assert await _worker_ids(store, table) == {"live"}, table


async def _worker_ids(store: Store, table: str) -> set[str]:
    def op(tx: Tx) -> set[str]:
        rows = tx.all(f"SELECT worker_id FROM {table} WHERE namespace = ?", (NS,))
        return {row["worker_id"] for row in rows}

    return await store._read(op)  # type: ignore[attr-defined,no-any-return]
