"""Schedules against a real server process over gRPC: on-time firing, overlap policies,
exactly one start per due time across a SIGKILL, backfill, the management calls, and
the stable reasons of bad input. Runs need no worker here: a started run stays open
(its first workflow task queued), which is what the overlap policies look at."""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, datetime, timedelta

import pytest

from durable_rpc import Client, ScheduleOverlap, ScheduleSpec
from durable_rpc.errors import InvalidArgumentError, NotFoundError
from durable_rpc.store._schedule_spec import run_workflow_id
from tests.e2e.conftest import ServerProcess, eventually

SECOND = timedelta(seconds=1)
# How late a firing may come on a shared 2-core machine (the loop aims for 10 ms).
LATENESS = timedelta(seconds=1.5)


def ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


async def started(client: Client, schedule_id: str) -> dict[str, datetime]:
    """Every run the schedule started: workflow id -> start time (database clock)."""
    runs: dict[str, datetime] = {}
    async for info in client.list_workflows(workflow_type="Ticker", page_size=1000):
        if info.workflow_id.startswith(f"{schedule_id}-"):
            assert info.workflow_id not in runs, f"two runs of {info.workflow_id}"
            assert info.start_time is not None
            runs[info.workflow_id] = info.start_time
    return runs


async def actions(client: Client, schedule_id: str) -> list[str]:
    return [a.action for a in (await client.describe_schedule(schedule_id)).recent_actions]


async def test_interval_fires_on_time_and_allow_all_overlaps(client: Client) -> None:
    await client.create_schedule(
        "tick",
        "Ticker",
        1,
        spec=ScheduleSpec(interval=SECOND),
        task_queue="q",
        overlap=ScheduleOverlap.ALLOW_ALL,
    )
    due = (await client.describe_schedule("tick")).next_due_times[:3]
    assert [ms(b) - ms(a) for a, b in itertools.pairwise(due)] == [1000, 1000]
    ids = {run_workflow_id("tick", ms(t)): t for t in due}

    async def all_started() -> bool:
        return set(ids) <= set(await started(client, "tick"))

    await eventually(all_started, timeout=15, what="three interval firings")
    runs = await started(client, "tick")
    for workflow_id, due_time in ids.items():
        # On time: not before its due time, and at most LATENESS after it.
        assert due_time <= runs[workflow_id] <= due_time + LATENESS, workflow_id


async def test_cron_fires_on_time_and_skip_skips_while_open(client: Client) -> None:
    await client.create_schedule(
        "cron",
        "Ticker",
        spec=ScheduleSpec(cron="* * * * * */1", timezone="Europe/Berlin"),
        task_queue="q",
    )
    first, second = (await client.describe_schedule("cron")).next_due_times[:2]
    assert ms(first) % 1000 == 0 and ms(second) - ms(first) == 1000

    async def skipped_once() -> bool:
        return "skipped" in await actions(client, "cron")

    await eventually(skipped_once, timeout=15, what="a skipped due time")
    runs = await started(client, "cron")
    assert list(runs) == [run_workflow_id("cron", ms(first))]  # SKIP: the first is open
    assert first <= runs[run_workflow_id("cron", ms(first))] <= first + LATENESS


async def test_terminate_other_ends_the_open_run(client: Client) -> None:
    await client.create_schedule(
        "term",
        "Ticker",
        spec=ScheduleSpec(interval=SECOND),
        task_queue="q",
        overlap=ScheduleOverlap.TERMINATE_OTHER,
    )
    first = (await client.describe_schedule("term")).next_due_times[0]

    async def two_started() -> bool:
        return len(await started(client, "term")) >= 2

    await eventually(two_started, timeout=15, what="a second run")
    described = await client.get_handle(run_workflow_id("term", ms(first))).describe()
    assert described.info.status == "terminated"


async def test_sigkill_at_the_due_moment_neither_skips_nor_duplicates(
    server: ServerProcess, client: Client
) -> None:
    await client.create_schedule(
        "kill",
        "Ticker",
        spec=ScheduleSpec(interval=SECOND),
        task_queue="q",
        overlap=ScheduleOverlap.ALLOW_ALL,
    )
    info = await client.describe_schedule("kill")
    first = ms(info.next_due_times[0])
    loop = asyncio.get_running_loop()
    # Kill around three consecutive due moments: just before, at, and just after one.
    for offset_ms in (-5, 0, 5):
        runs = await started(client, "kill")
        target = max(ms(t) for t in runs.values()) + 1000 if runs else first + 1000
        due = target - target % 1000 + first % 1000
        until = (due + offset_ms) / 1000 - datetime.now(UTC).timestamp()
        await asyncio.sleep(max(0.0, until))  # waiting for a moment of the clock
        server.kill()
        await loop.run_in_executor(None, server.start)
    last_due = ms(datetime.now(UTC)) + 1500

    async def caught_up() -> bool:
        return run_workflow_id("kill", last_due - (last_due - first) % 1000) in await started(
            client, "kill"
        )

    await eventually(caught_up, timeout=20, what="firings after the restarts")
    runs = await started(client, "kill")
    newest = max(ms(t) for t in runs.values())
    expected = {run_workflow_id("kill", d) for d in range(first, newest - 1000, 1000)}
    # Every due time up to the newest firing has exactly one run (no gap, no duplicate:
    # `started` refuses a workflow id seen twice).
    assert expected <= set(runs), sorted(expected - set(runs))


async def test_backfill_starts_exactly_its_range(client: Client) -> None:
    await client.create_schedule(
        "back", "Ticker", spec=ScheduleSpec(interval=timedelta(hours=1)), task_queue="q"
    )
    anchor = (await client.describe_schedule("back")).next_due_times[0] - timedelta(hours=1)
    start, end = anchor - timedelta(hours=5), anchor - timedelta(hours=2)
    assert await client.backfill_schedule("back", start, end) == 4
    assert await client.backfill_schedule("back", start, end) == 0  # retried: nothing new
    expected = {run_workflow_id("back", ms(anchor - timedelta(hours=h))) for h in (2, 3, 4, 5)}
    assert set(await started(client, "back")) == expected


async def test_pause_unpause_trigger_update_delete(client: Client) -> None:
    await client.create_schedule(
        "ops", "Ticker", spec=ScheduleSpec(interval=timedelta(hours=1)), task_queue="q"
    )
    await client.pause_schedule("ops", "deploy in progress")
    paused = await client.describe_schedule("ops")
    assert (paused.paused, paused.note, paused.next_due_times) == (True, "deploy in progress", [])
    assert await client.trigger_schedule("ops") == "started"
    assert await client.trigger_schedule("ops") == "skipped"
    await client.unpause_schedule("ops", "done")
    await client.update_schedule(
        "ops",
        "Ticker",
        2,
        spec=ScheduleSpec(cron="0 9 * * 1-5", timezone="America/New_York"),
        task_queue="q",
        overlap=ScheduleOverlap.ALLOW_ALL,
    )
    updated = await client.describe_schedule("ops")
    assert not updated.paused and updated.overlap is ScheduleOverlap.ALLOW_ALL
    assert updated.spec.cron == "0 9 * * 1-5"
    nine = updated.next_due_times[0].astimezone(__import__("zoneinfo").ZoneInfo("America/New_York"))
    assert (nine.hour, nine.minute, nine.weekday() < 5) == (9, 0, True)
    assert [s.schedule_id for s in await client.list_schedules()] == ["ops"]
    await client.delete_schedule("ops")
    assert await client.list_schedules() == []


async def test_bad_input_has_stable_reasons(client: Client) -> None:
    for spec in (
        ScheduleSpec(cron="61 * * * *"),
        ScheduleSpec(),
        ScheduleSpec(interval=SECOND, timezone="Nowhere/City"),
    ):
        with pytest.raises(InvalidArgumentError) as bad:
            await client.create_schedule("bad", "Ticker", spec=spec, task_queue="q")
        assert bad.value.reason == "INVALID_ARGUMENT"
    for call in (
        client.describe_schedule("missing"),
        client.trigger_schedule("missing"),
        client.delete_schedule("missing"),
        client.pause_schedule("missing"),
    ):
        with pytest.raises(NotFoundError) as missing:
            await call
        assert missing.value.reason == "NOT_FOUND"
