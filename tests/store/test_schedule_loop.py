"""The server's schedule loop with a real store and the server's notifier: a buffered
due time starts when the run it waits for closes, not at the loop's look-again bound."""

from __future__ import annotations

import asyncio

from durable_rpc.server._notify import Notifier
from durable_rpc.server._schedules import ScheduleLoop
from durable_rpc.store import Store
from durable_rpc.store._schedule_records import ScheduleDefinition
from durable_rpc.store._schedule_spec import ScheduleSpec
from tests.store.helpers import NS, QUEUE, eventually, wait_db_time

HOUR_MS = 3_600_000


async def test_a_buffered_start_follows_the_close_it_waits_for(store: Store) -> None:
    # The loop would look again only after an hour (the next due slot and its bound):
    # the buffered start can only come from the close's notification.
    loop = ScheduleLoop(store, max_sleep_s=HOUR_MS / 1000)
    store.set_listener(Notifier(asyncio.get_running_loop(), lambda _ms: None, loop.run_closed))
    definition = ScheduleDefinition(
        "Wf", "1", QUEUE, b"", ScheduleSpec(interval_ms=HOUR_MS), "BUFFER_ONE"
    )
    await store.create_schedule(NS, "b", definition)
    assert await store.trigger_schedule(NS, "b") == "started"
    await wait_db_time(store, await store.now_ms() + 2)  # the next trigger: another due time
    assert await store.trigger_schedule(NS, "b") == "buffered"
    info = await store.describe_schedule(NS, "b")
    first = next(a for a in info.recent_actions if a.action == "started")
    loop.start()
    try:

        async def passed() -> bool:
            return (NS, first.run_id) in loop.waiting_on

        await eventually(passed, what="the loop's pass")
        await store.terminate(NS, first.workflow_id, None, "done")

        async def second_started() -> bool:
            info = await store.describe_schedule(NS, "b")
            return [a.action for a in info.recent_actions].count("started") == 2

        await eventually(second_started, what="the buffered start")
    finally:
        await loop.stop()
