"""Schedules in the store: each due time starts exactly one run, on every backend."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from durable_rpc.errors import InvalidArgumentError, NotFoundError
from durable_rpc.store import Store
from durable_rpc.store._schedule_records import ScheduleDefinition
from durable_rpc.store._schedule_spec import ScheduleSpec, run_workflow_id
from tests.store.conftest import Backend
from tests.store.helpers import NS, QUEUE, wait_db_time


def every(ms: int, overlap: str = "SKIP", **spec: object) -> ScheduleDefinition:
    return ScheduleDefinition(
        "Wf",
        "1",
        QUEUE,
        b"",
        ScheduleSpec(interval_ms=ms, **spec),
        overlap,  # type: ignore[arg-type]
    )


async def runs_of(store: Store, schedule_id: str) -> list[str]:
    info = await store.describe_schedule(NS, schedule_id)
    return sorted(a.workflow_id for a in info.recent_actions if a.action == "started")


async def fire_until(store: Store, due_ms: int) -> int:
    await wait_db_time(store, due_ms)
    return (await store.fire_schedules()).started


async def test_interval_fires_each_due_time_once(store: Store) -> None:
    await store.create_schedule(NS, "s", every(200, "ALLOW_ALL"))
    first, second = (await store.describe_schedule(NS, "s")).next_due_ms[:2]
    assert second - first == 200
    assert await fire_until(store, first) == 1
    # A second pass (another replica) in the same slot starts nothing.
    assert (await store.fire_schedules()).started == 0
    assert await fire_until(store, second) == 1
    assert await runs_of(store, "s") == [run_workflow_id("s", first), run_workflow_id("s", second)]


async def test_two_stores_fire_a_due_time_once(backend: Backend) -> None:
    if not backend.durable:
        pytest.skip("needs two stores on one database")
    a, b = backend.make(), backend.make()
    async with a, b:
        await a.create_schedule(NS, "s", every(300, "ALLOW_ALL"))
        due = (await a.describe_schedule(NS, "s")).next_due_ms[0]
        await wait_db_time(a, due)
        # Both passes at once (two replicas): both may read the slot as due; the fenced
        # claim lets one start it.
        for _ in range(3):
            passes = await asyncio.gather(*(s.fire_schedules() for s in (a, b, a, b)))
            assert sum(p.started for p in passes) == 1
            due += 300
            await wait_db_time(a, due)


async def test_cron_with_seconds_in_a_time_zone(store: Store) -> None:
    await store.create_schedule(
        NS,
        "c",
        ScheduleDefinition(
            "Wf", "1", QUEUE, b"", ScheduleSpec(cron="* * * * * */1", timezone="Asia/Kolkata")
        ),
    )
    due = (await store.describe_schedule(NS, "c")).next_due_ms
    assert [b - a for a, b in itertools.pairwise(due)] == [1000] * 4
    assert due[0] % 1000 == 0
    assert await fire_until(store, due[0]) == 1


async def test_skip_while_the_last_run_is_open(store: Store) -> None:
    await store.create_schedule(NS, "s", every(200, "SKIP"))
    first, second = (await store.describe_schedule(NS, "s")).next_due_ms[:2]
    assert await fire_until(store, first) == 1
    assert await fire_until(store, second) == 0
    actions = [a.action for a in (await store.describe_schedule(NS, "s")).recent_actions]
    assert actions == ["skipped", "started"]


async def test_terminate_other_and_buffer_one(store: Store) -> None:
    await store.create_schedule(NS, "t", every(200, "TERMINATE_OTHER"))
    first, second = (await store.describe_schedule(NS, "t")).next_due_ms[:2]
    assert await fire_until(store, first) == 1
    assert await fire_until(store, second) == 1
    first_run = await store.describe(NS, run_workflow_id("t", first), None)
    assert first_run.info.status == "terminated"
    await store.delete_schedule(NS, "t")

    await store.create_schedule(NS, "b", every(200, "BUFFER_ONE"))
    first, second = (await store.describe_schedule(NS, "b")).next_due_ms[:2]
    assert await fire_until(store, first) == 1
    assert await fire_until(store, second) == 0  # buffered behind the open run
    await store.terminate(NS, run_workflow_id("b", first), None, "done")
    assert (await store.fire_schedules()).started == 1
    assert run_workflow_id("b", second) in await runs_of(store, "b")


async def test_backfill_starts_exactly_its_range_once(store: Store) -> None:
    await store.create_schedule(NS, "s", every(1000, "SKIP"))
    anchor = (await store.describe_schedule(NS, "s")).next_due_ms[0] - 1000
    start, end = anchor - 5000, anchor - 2000  # due times anchor-5000 .. anchor-2000
    assert await store.backfill_schedule(NS, "s", start, end) == 4
    assert await store.backfill_schedule(NS, "s", start, end) == 0  # a retried backfill
    assert await runs_of(store, "s") == sorted(
        run_workflow_id("s", anchor - k * 1000) for k in (2, 3, 4, 5)
    )


async def test_pause_trigger_update_delete(store: Store) -> None:
    await store.create_schedule(NS, "s", every(60_000))
    await store.pause_schedule(NS, "s", True, "maintenance")
    info = await store.describe_schedule(NS, "s")
    assert (info.paused, info.note, info.next_due_ms) == (True, "maintenance", [])
    assert await store.trigger_schedule(NS, "s") == "started"
    assert await store.trigger_schedule(NS, "s") == "skipped"  # SKIP: the first is open
    await store.pause_schedule(NS, "s", False, "")
    await store.update_schedule(NS, "s", every(5_000, "ALLOW_ALL"))
    info = await store.describe_schedule(NS, "s")
    assert not info.paused and info.definition.overlap == "ALLOW_ALL"
    assert info.next_due_ms[1] - info.next_due_ms[0] == 5_000
    assert [s.schedule_id for s in await store.list_schedules(NS)] == ["s"]
    await store.delete_schedule(NS, "s")
    assert await store.list_schedules(NS) == []
    with pytest.raises(NotFoundError):
        await store.describe_schedule(NS, "s")


async def test_bad_input_is_refused(store: Store) -> None:
    bad = [
        ScheduleSpec(cron="not a cron"),
        ScheduleSpec(interval_ms=1000, timezone="Mars/Olympus"),
        ScheduleSpec(),
        ScheduleSpec(cron="* * * * *", interval_ms=1000),
    ]
    for spec in bad:
        with pytest.raises(InvalidArgumentError):
            await store.create_schedule(NS, "x", ScheduleDefinition("Wf", "1", QUEUE, b"", spec))
    with pytest.raises(InvalidArgumentError, match="overlap"):
        await store.create_schedule(NS, "x", every(1000, "SOMETIMES"))
    with pytest.raises(NotFoundError):
        await store.trigger_schedule(NS, "missing")
    await store.create_schedule(NS, "x", every(1000))
    with pytest.raises(InvalidArgumentError, match="already exists"):
        await store.create_schedule(NS, "x", every(1000))
