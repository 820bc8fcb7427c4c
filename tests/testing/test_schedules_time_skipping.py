"""Schedules under time skipping: each due time fires at its own moment of the skipped
clock (the skipper jumps to a schedule's due slot and waits for it to fire), with a real
worker running every started run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from durable_rpc import ScheduleOverlap, ScheduleSpec, Worker, workflow
from durable_rpc.client import Client
from durable_rpc.store._schedule_spec import run_workflow_id
from durable_rpc.testing import WorkflowEnvironment

HOUR = timedelta(hours=1)
# Real time a firing and its run may take on a shared 2-core machine; the skipped clock
# runs on in real time meanwhile.
SLACK = timedelta(seconds=2)


@workflow.defn(name="Stamp")
class Stamp:
    @workflow.run
    async def run(self) -> str:
        return workflow.now().isoformat()


@workflow.defn(name="DaySleeper")
class DaySleeper:
    @workflow.run
    async def run(self) -> None:
        await workflow.sleep(timedelta(days=1))


async def runs_of(
    client: Client, schedule_id: str, workflow_type: str = "Stamp"
) -> dict[str, datetime]:
    """Every run the schedule started: workflow id -> start time (the skipped clock)."""
    runs: dict[str, datetime] = {}
    async for info in client.list_workflows(workflow_type=workflow_type, page_size=1000):
        if info.workflow_id.startswith(f"{schedule_id}-"):
            assert info.start_time is not None
            runs[info.workflow_id] = info.start_time
    return runs


def ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


async def test_an_hourly_interval_fires_three_times_in_three_skipped_hours() -> None:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[Stamp]),
    ):
        env.auto_time_skipping = False
        await env.client.create_schedule(
            "hourly", Stamp.run, spec=ScheduleSpec(interval=HOUR), task_queue="q"
        )
        due = (await env.client.describe_schedule("hourly")).next_due_times[:4]
        await env.sleep(3 * HOUR + timedelta(minutes=1))
        runs = await runs_of(env.client, "hourly")
        assert sorted(runs) == sorted(run_workflow_id("hourly", ms(t)) for t in due[:3])
        for t in due[:3]:
            handle = env.client.get_handle(run_workflow_id("hourly", ms(t)))
            # Started at its due time on the skipped clock, and ran to completion (SKIP
            # would have skipped the next due time of a run still open).
            assert t <= runs[handle.workflow_id] <= t + SLACK
            ran_at = datetime.fromisoformat(await handle.result(timeout=10))
            assert t <= ran_at <= t + SLACK
        actions = [a.action for a in (await env.client.describe_schedule("hourly")).recent_actions]
        assert actions == ["started"] * 3


async def test_a_daily_cron_fires_at_nine_local_across_a_dst_change() -> None:
    # New York moved its clocks from 02:00 EST to 03:00 EDT on 2026-03-08: 09:00 local is
    # 14:00 UTC before that day and 13:00 UTC from it.
    new_york = ZoneInfo("America/New_York")
    async with (
        await WorkflowEnvironment.start_time_skipping(
            start_time=datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
        ) as env,
        Worker(env.client, task_queue="q", workflows=[Stamp]),
    ):
        await env.client.create_schedule(
            "nine",
            Stamp.run,
            spec=ScheduleSpec(cron="0 9 * * *", timezone="America/New_York"),
            task_queue="q",
            overlap=ScheduleOverlap.BUFFER_ALL,
        )
        await env.sleep(timedelta(days=4))
        runs = await runs_of(env.client, "nine")
    expected = [
        datetime(2026, 3, 6, 14, tzinfo=UTC),
        datetime(2026, 3, 7, 14, tzinfo=UTC),
        datetime(2026, 3, 8, 13, tzinfo=UTC),
        datetime(2026, 3, 9, 13, tzinfo=UTC),
    ]
    assert sorted(runs) == [run_workflow_id("nine", ms(t)) for t in expected]
    for t in expected:
        started = runs[run_workflow_id("nine", ms(t))]
        assert t <= started <= t + SLACK
        local = started.astimezone(new_york)
        assert (local.hour, local.minute) == (9, 0)


async def test_automatic_skipping_stops_at_each_slot_and_does_not_run_away() -> None:
    # A day-long sleep drives the clock; the hourly schedule's slots on the way each fire
    # at their moment, and once the sleep is over nothing moves the clock (a schedule's
    # slot alone is no reason to jump).
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[Stamp, DaySleeper]),
    ):
        await env.client.create_schedule(
            "hourly",
            Stamp.run,
            spec=ScheduleSpec(interval=HOUR),
            task_queue="q",
            overlap=ScheduleOverlap.ALLOW_ALL,
        )
        due = (await env.client.describe_schedule("hourly")).next_due_times[0]
        sleeper = await env.client.start_workflow(DaySleeper.run, id="sleeper", task_queue="q")
        await sleeper.result(timeout=30)
        runs = await runs_of(env.client, "hourly")
        assert await env.now() < due + 24 * HOUR  # no jump since the sleep ended
    expected = [due + k * HOUR for k in range(24)]
    assert sorted(runs) == sorted(run_workflow_id("hourly", ms(t)) for t in expected)
    for t in expected:
        assert t <= runs[run_workflow_id("hourly", ms(t))] <= t + SLACK


@workflow.defn(name="Nap")
class Nap:
    @workflow.run
    async def run(self, minutes: int) -> None:
        await workflow.sleep(timedelta(minutes=minutes))


async def test_buffer_all_starts_the_waiting_due_time_when_the_run_closes() -> None:
    # Hourly runs that take 90 minutes: the 2 h due time waits for the first run and
    # starts at its close (2.5 h); the 3 h one waits behind it.
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[Nap]),
    ):
        # The naps wait on timers: automatic skipping would move on while the test reads.
        env.auto_time_skipping = False
        await env.client.create_schedule(
            "buf",
            Nap.run,
            90,
            spec=ScheduleSpec(interval=HOUR),
            task_queue="q",
            overlap=ScheduleOverlap.BUFFER_ALL,
        )
        one, two, three = (await env.client.describe_schedule("buf")).next_due_times[:3]
        await env.sleep(3 * HOUR + timedelta(minutes=30))
        runs = await runs_of(env.client, "buf", "Nap")
        actions = {
            a.due_time: a.action for a in (await env.client.describe_schedule("buf")).recent_actions
        }
    assert sorted(runs) == sorted(run_workflow_id("buf", ms(t)) for t in (one, two))
    assert one <= runs[run_workflow_id("buf", ms(one))] <= one + SLACK
    closed = one + timedelta(minutes=90)
    assert closed <= runs[run_workflow_id("buf", ms(two))] <= closed + SLACK
    assert actions[three] == "buffered"


async def test_cancel_other_cancels_the_open_run_and_starts_when_it_closed() -> None:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[Nap]),
    ):
        # The naps wait on timers: automatic skipping would move on while the test reads.
        env.auto_time_skipping = False
        await env.client.create_schedule(
            "cancel",
            Nap.run,
            90,
            spec=ScheduleSpec(interval=HOUR),
            task_queue="q",
            overlap=ScheduleOverlap.CANCEL_OTHER,
        )
        one, two = (await env.client.describe_schedule("cancel")).next_due_times[:2]
        await env.sleep(2 * HOUR + timedelta(minutes=30))
        runs = await runs_of(env.client, "cancel", "Nap")
        first = await env.client.get_handle(run_workflow_id("cancel", ms(one))).describe()
        second = await env.client.get_handle(run_workflow_id("cancel", ms(two))).describe()
    # The first run was cancelled (its workflow code saw the request and ended), and the
    # second started once it had closed, at its due time (the cancel took no clock time).
    assert (first.info.status, second.info.status) == ("cancelled", "running")
    assert first.info.close_time is not None
    assert two <= first.info.close_time <= runs[run_workflow_id("cancel", ms(two))]
    assert runs[run_workflow_id("cancel", ms(two))] <= two + SLACK
