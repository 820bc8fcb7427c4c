"""Schedules in the store: each due time starts exactly one run, on every backend."""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
from pathlib import Path

import pytest

from durable_rpc.errors import InvalidArgumentError, NotFoundError
from durable_rpc.store import SQLiteStore, Store
from durable_rpc.store._migrations import SQLITE_MIGRATIONS
from durable_rpc.store._schedule_buffer import BUFFER_MAX
from durable_rpc.store._schedule_records import ScheduleDefinition
from durable_rpc.store._schedule_spec import ScheduleSpec, jitter, run_workflow_id
from durable_rpc.store._tx import Tx
from tests.store.conftest import Backend
from tests.store.helpers import NS, QUEUE, kinds, wait_db_time


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


async def started_due_times(store: Store, schedule_id: str) -> list[int]:
    """The due times the schedule started, in the order it started them."""
    info = await store.describe_schedule(NS, schedule_id)
    started = [a for a in info.recent_actions if a.action == "started"]
    return [a.due_ms for a in sorted(started, key=lambda a: (a.at_ms, a.due_ms))]


async def test_buffer_all_starts_every_waiting_due_time_in_order(store: Store) -> None:
    await store.create_schedule(NS, "b", every(300, "BUFFER_ALL"))
    first, second, third = (await store.describe_schedule(NS, "b")).next_due_ms[:3]
    assert await fire_until(store, first) == 1
    assert await fire_until(store, second) == 0  # waits behind the open run
    assert await fire_until(store, third) == 0  # and behind the waiting one
    actions = {a.due_ms: a.action for a in (await store.describe_schedule(NS, "b")).recent_actions}
    assert (actions[second], actions[third]) == ("buffered", "buffered")
    # One at a time, oldest first: each starts only when the previous run closed.
    for closing, starting in ((first, second), (second, third)):
        assert (await store.fire_schedules()).started == 0
        await store.terminate(NS, run_workflow_id("b", closing), None, "done")
        assert (await store.fire_schedules()).started == 1
        assert (await started_due_times(store, "b"))[-1] == starting
    assert (await started_due_times(store, "b"))[:3] == [first, second, third]
    # Describe names each started run.
    for action in (await store.describe_schedule(NS, "b")).recent_actions:
        if action.action == "started":
            run = await store.describe(NS, action.workflow_id, None)
            assert action.run_id == run.info.run_id


async def test_a_paused_schedule_holds_its_waiting_due_times(store: Store) -> None:
    await store.create_schedule(NS, "p", every(300, "BUFFER_ALL"))
    first, second = (await store.describe_schedule(NS, "p")).next_due_ms[:2]
    assert await fire_until(store, first) == 1
    assert await fire_until(store, second) == 0
    await store.pause_schedule(NS, "p", True, "hold")
    await store.terminate(NS, run_workflow_id("p", first), None, "done")
    assert (await store.fire_schedules()).started == 0  # paused: nothing starts
    await store.pause_schedule(NS, "p", False, "")
    assert (await store.fire_schedules()).started == 1
    assert (await started_due_times(store, "p")) == [first, second]


@pytest.mark.parametrize("overlap", ["BUFFER_ONE", "BUFFER_ALL"])
async def test_a_due_time_waits_behind_buffered_ones_even_after_the_close(
    store: Store, overlap: str
) -> None:
    # The run closes and the next due time comes before any pass ran: the waiting due time
    # starts first (the pass starts buffered ones before it fires due slots).
    await store.create_schedule(NS, "b", every(300, overlap))
    first, second, third = (await store.describe_schedule(NS, "b")).next_due_ms[:3]
    assert await fire_until(store, first) == 1
    assert await fire_until(store, second) == 0
    await store.terminate(NS, run_workflow_id("b", first), None, "done")
    assert await fire_until(store, third) == 1
    assert (await started_due_times(store, "b")) == [first, second]
    actions = {a.due_ms: a.action for a in (await store.describe_schedule(NS, "b")).recent_actions}
    assert actions[third] == "buffered"


async def test_cancel_other_requests_cancellation_and_waits_for_the_close(store: Store) -> None:
    await store.create_schedule(NS, "c", every(300, "CANCEL_OTHER"))
    first, second, third = (await store.describe_schedule(NS, "c")).next_due_ms[:3]
    assert await fire_until(store, first) == 1
    assert await fire_until(store, second) == 0
    run = await store.describe(NS, run_workflow_id("c", first), None)
    # Asked to cancel, not ended: it may run its cleanup, and the next start waits for it.
    assert (run.info.status, run.cancel_requested) == ("running", True)
    history = await store.get_history(NS, run_workflow_id("c", first), None, 0, 100)
    assert kinds(history.events).count("cancel_requested") == 1
    assert await fire_until(store, third) == 0  # the newest due time replaces the waiting one
    history = await store.get_history(NS, run_workflow_id("c", first), None, 0, 100)
    assert kinds(history.events).count("cancel_requested") == 1
    await store.terminate(NS, run_workflow_id("c", first), None, "cancelled at last")
    assert (await store.fire_schedules()).started == 1
    assert await started_due_times(store, "c") == [first, third]


async def test_two_stores_start_a_buffered_due_time_once(backend: Backend) -> None:
    if not backend.durable:
        pytest.skip("needs two stores on one database")
    a, b = backend.make(), backend.make()
    async with a, b:
        await a.create_schedule(NS, "s", every(60_000, "BUFFER_ALL"))
        for _ in range(3):
            await a.trigger_schedule(NS, "s")
            await wait_db_time(a, await a.now_ms() + 2)  # the next trigger: another due time
        assert len(await started_due_times(a, "s")) == 1
        for _ in range(2):
            info = await a.describe_schedule(NS, "s")
            last = max(
                (x for x in info.recent_actions if x.action == "started"), key=lambda x: x.due_ms
            )
            await a.terminate(NS, last.workflow_id, None, "done")
            # Both replicas' passes at once: the fenced take lets one start it.
            passes = await asyncio.gather(*(s.fire_schedules() for s in (a, b, a, b)))
            assert sum(p.started for p in passes) == 1


async def test_due_times_older_than_the_catchup_window_are_each_recorded_missed(
    store: Store,
) -> None:
    definition = ScheduleDefinition(
        "Wf", "1", QUEUE, b"", ScheduleSpec(interval_ms=100), "ALLOW_ALL", catchup_window_ms=300
    )
    await store.create_schedule(NS, "m", definition)
    first = (await store.describe_schedule(NS, "m")).next_due_ms[0]
    await wait_db_time(store, first + 1000)  # no pass ran: an outage of ten due times
    firing = await store.fire_schedules()
    dues = range(first, firing.db_now_ms + 1, 100)
    info = await store.describe_schedule(NS, "m")
    actions = {a.due_ms: a.action for a in info.recent_actions}
    # Every due time of the outage is accounted for, exactly: missed when older than the
    # window (by the database clock of the pass), started when inside it.
    assert actions == {d: "missed" if firing.db_now_ms - d > 300 else "started" for d in dues}
    assert firing.started == sum(1 for d in dues if firing.db_now_ms - d <= 300)
    assert info.next_due_ms[0] == dues[-1] + 100


async def test_jitter_delays_each_firing_deterministically_within_its_bound(
    store: Store,
) -> None:
    await store.create_schedule(NS, "j", every(60_000, jitter_ms=30_000))
    due = (await store.describe_schedule(NS, "j")).next_due_ms[0]
    # The slot fires at its due time plus the jitter of that due time: the same amount on
    # every replica and after any restart (derived from the schedule id and due time).
    delays = {jitter("j", due + k * 60_000, 30_000) for k in range(200)}
    assert all(0 <= d < 30_000 for d in delays) and len(delays) > 150
    assert jitter("j", due, 30_000) == jitter("j", due, 30_000)
    assert (await fire_slot(store, "j")) == due + jitter("j", due, 30_000)


async def waiting_due_times(store: Store, schedule_id: str) -> int:
    def op(tx: Tx) -> int:
        return int(
            tx.value("SELECT COUNT(*) FROM schedule_buffer WHERE schedule_id = ?", (schedule_id,))
        )

    return await store._read(op)  # type: ignore[attr-defined, no-any-return]


async def test_update_and_delete_drop_the_waiting_due_times(store: Store) -> None:
    await store.create_schedule(NS, "u", every(60_000, "BUFFER_ALL"))
    assert await store.trigger_schedule(NS, "u") == "started"
    await wait_db_time(store, await store.now_ms() + 2)  # the next trigger: another due time
    assert await store.trigger_schedule(NS, "u") == "buffered"
    assert await waiting_due_times(store, "u") == 1
    # An update replaces the spec: the old spec's waiting due times go with it.
    await store.update_schedule(NS, "u", every(60_000, "BUFFER_ALL"))
    assert await waiting_due_times(store, "u") == 0
    first = (await started_due_times(store, "u"))[0]
    await store.terminate(NS, run_workflow_id("u", first), None, "done")
    assert (await store.fire_schedules()).started == 0
    assert await store.trigger_schedule(NS, "u") == "started"
    await wait_db_time(store, await store.now_ms() + 2)
    assert await store.trigger_schedule(NS, "u") == "buffered"
    await store.delete_schedule(NS, "u")
    assert await waiting_due_times(store, "u") == 0


async def test_buffer_all_keeps_at_most_buffer_max_due_times_waiting(store: Store) -> None:
    # A 1 ms interval behind an open run: passes of 100 due times each fill the buffer to
    # its bound; the due times beyond it are recorded as skipped, not kept.
    await store.create_schedule(NS, "f", every(1, "BUFFER_ALL"))
    first = (await store.describe_schedule(NS, "f")).next_due_ms[0]
    await wait_db_time(store, first + BUFFER_MAX + 300)
    for _ in range(13):  # 1,300 due times: one started, 1,000 waiting, the rest skipped
        await store.fire_schedules()

    assert await waiting_due_times(store, "f") == BUFFER_MAX
    actions = [a.action for a in (await store.describe_schedule(NS, "f")).recent_actions]
    assert actions == ["skipped"] * len(actions) and actions


async def fire_slot(store: Store, schedule_id: str) -> int:
    """When the schedule's next slot fires (the row's fire_at_ms)."""

    def op(tx: Tx) -> int:
        return int(
            tx.value(
                "SELECT fire_at_ms FROM schedules WHERE namespace = ? AND schedule_id = ?",
                (NS, schedule_id),
            )
        )

    return await store._read(op)  # type: ignore[attr-defined, no-any-return]


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


async def test_migration_16_keeps_a_buffer_one_due_time_waiting(tmp_path: Path) -> None:
    # A database of version 15 with BUFFER_ONE's due time in its old column: after the
    # upgrade it waits in schedule_buffer and starts once the run closed.
    path = tmp_path / "v15.db"
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
        "applied_at_ms INTEGER NOT NULL)"
    )
    for migration in SQLITE_MIGRATIONS[:15]:
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, ?, 0)", (migration.version, ""))
    conn.execute("INSERT OR IGNORE INTO namespaces (name, created_at_ms) VALUES (?, 0)", (NS,))
    conn.execute(
        "INSERT INTO schedules (namespace, schedule_id, workflow_type, workflow_version, "
        "task_queue, input, spec, overlap, catchup_window_ms, paused, note, anchor_ms, "
        "next_due_ms, fire_at_ms, buffered_due_ms, created_at_ms) VALUES (?, 'b', 'Wf', '1', "
        "?, x'', ?, 'BUFFER_ONE', 1000000, 0, '', 0, 4102444800000, 4102444800000, 60000, 0)",
        (NS, QUEUE, json.dumps({"interval_ms": 60_000})),
    )
    conn.commit()
    conn.close()
    store = SQLiteStore(str(path))
    async with store:
        assert (await store.fire_schedules()).started == 1  # no last run: it starts now
        assert await runs_of(store, "b") == [run_workflow_id("b", 60_000)]
