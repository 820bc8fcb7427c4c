"""Timers fire once through process_due, can be cancelled, and survive a restart."""

from __future__ import annotations

from durable_rpc.store import Store
from tests.store.conftest import Backend
from tests.store.helpers import (
    NS,
    QUEUE,
    cancel_timer,
    claim,
    events,
    history,
    kinds,
    start,
    timer,
    wait_db_time,
)


def fired(raw: list[bytes]) -> list[int]:
    return [e.timer_fired.seq for e in events(raw) if e.HasField("timer_fired")]


async def test_timer_fires_once(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [timer(1, 60)])
    started_at = events(await history(store))[-1].event_time.ToMilliseconds()
    early = await store.process_due()
    if early.db_now_ms < started_at + 60:
        assert early.fired_timers == 0
        assert early.next_due_ms == started_at + 60
    await wait_db_time(store, started_at + 60)
    report = await store.process_due()
    assert report.fired_timers + early.fired_timers == 1
    assert (await store.process_due()).fired_timers == 0
    assert fired(await history(store)) == [1]
    wft = await claim(store)
    assert kinds(wft.events)[-1] == "timer_fired"
    assert (await store.process_due()).next_due_ms == wft.lease_expires_at_ms


async def test_cancelled_timer_never_fires(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [timer(1, 30), timer(2, 30)])
    await store.signal_workflow(NS, "wf-1", None, "s", b"", "s1")
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [cancel_timer(3, 1)])
    assert events(await history(store))[-1].timer_cancelled.seq == 1
    await wait_db_time(store, task.workflow_time_ms + 40)
    assert (await store.process_due()).fired_timers == 1
    assert fired(await history(store)) == [2]


async def test_timer_started_and_cancelled_in_one_task(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [timer(1, 0), cancel_timer(2, 1)])
    assert (await store.process_due()).fired_timers == 0
    assert kinds(await history(store))[-2:] == ["timer_started", "timer_cancelled"]


async def test_zero_duration_timer_fires_on_next_pass(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [timer(1, 0)])
    assert (await store.process_due()).fired_timers == 1
    assert fired(await history(store)) == [1]


async def test_timer_survives_close_and_reopen(durable_backend: Backend) -> None:
    first = durable_backend.make()
    await first.open()
    await start(first)
    task = await claim(first)
    await first.complete_workflow_task(NS, task.lease, 1, [timer(1, 80)])
    due = events(await history(first))[-1].event_time.ToMilliseconds() + 80
    await first.close()

    second = durable_backend.make()
    await second.open()
    try:
        report = await second.process_due()
        if report.db_now_ms < due:
            assert report.fired_timers == 0
            assert report.next_due_ms == due
        await wait_db_time(second, due)
        total = report.fired_timers + (await second.process_due()).fired_timers
        assert total == 1
        assert fired(await history(second)) == [1]
        wft = await second.claim_workflow_task(NS, QUEUE, "w2", 1000)
        assert wft is not None and kinds(wft.events)[-1] == "timer_fired"
    finally:
        await second.close()
