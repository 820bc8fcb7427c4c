"""WorkflowEnvironment: local and time-skipping servers in the test's process."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest

from durable_rpc import ActivityError, RetryPolicy, Worker, activity, workflow
from durable_rpc.store import SQLiteStore
from durable_rpc.testing import WorkflowEnvironment
from tests.testing.golden_workflows import ACTIVITIES, WORKFLOWS, GoldenHello, GoldenSignal

WEEK = timedelta(days=7)


@workflow.defn(name="WeekSleeper")
class WeekSleeper:
    @workflow.run
    async def run(self) -> float:
        before = workflow.now()
        await workflow.sleep(WEEK)
        return (workflow.now() - before).total_seconds()


_flaky_calls: list[float] = []


@activity.defn
async def flaky() -> int:
    _flaky_calls.append(time.monotonic())
    if len(_flaky_calls) < 3:
        raise RuntimeError("not yet")
    return len(_flaky_calls)


@activity.defn
async def always_fails() -> None:
    raise RuntimeError("never works")


@workflow.defn(name="HourlyRetries")
class HourlyRetries:
    @workflow.run
    async def run(self) -> tuple[int, float]:
        before = workflow.now()
        calls = await workflow.execute_activity(
            flaky,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(hours=1), backoff_coefficient=2),
        )
        return calls, (workflow.now() - before).total_seconds()


@workflow.defn(name="GivesUpAfterADay")
class GivesUpAfterADay:
    @workflow.run
    async def run(self) -> tuple[str, float]:
        before = workflow.now()
        try:
            await workflow.execute_activity(
                always_fails,
                schedule_to_close_timeout=timedelta(days=1),
                retry_policy=RetryPolicy(initial_interval=timedelta(hours=5)),
            )
        except ActivityError as exc:
            return exc.cause.type, (workflow.now() - before).total_seconds()
        return "unexpected success", 0.0


ALL_WORKFLOWS = [*WORKFLOWS, WeekSleeper, HourlyRetries, GivesUpAfterADay]
ALL_ACTIVITIES = [*ACTIVITIES, flaky, always_fails]


async def test_one_week_sleep_is_skipped() -> None:
    started = time.monotonic()
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES),
    ):
        before = await env.now()
        handle = await env.client.start_workflow(WeekSleeper.run, id="week", task_queue="q")
        observed = await handle.result(timeout=10)
        assert WEEK.total_seconds() <= observed < WEEK.total_seconds() + 60
        assert await env.now() - before >= WEEK
    # The clock the workflow saw moved a week; the test took a blink (generous bound).
    assert time.monotonic() - started < 5


async def test_activity_retry_backoff_is_skipped() -> None:
    _flaky_calls.clear()
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES),
    ):
        handle = await env.client.start_workflow(HourlyRetries.run, id="retry", task_queue="q")
        calls, elapsed = await handle.result(timeout=10)
    assert calls == 3
    # Backoffs of 1 h then 2 h passed on the workflow's clock.
    assert 3 * 3600 <= elapsed < 3 * 3600 + 60


async def test_retries_until_schedule_to_close_under_skipping() -> None:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES),
    ):
        handle = await env.client.start_workflow(GivesUpAfterADay.run, id="s2c", task_queue="q")
        cause, elapsed = await handle.result(timeout=10)
    # Retried every few hours of skipped time, then given up within the one-day budget.
    assert cause == "RuntimeError"
    assert 5 * 3600 <= elapsed <= 24 * 3600


async def test_skips_asked_at_once_jump_once() -> None:
    # The automatic skipper and a test's sleep may ask in the same group-commit batch:
    # each must see the clock the previous one moved, not add the same gap again.
    store = SQLiteStore(":memory:")
    async with store:
        target = await store.now_ms() + 3_600_000
        reports = await asyncio.gather(*(store.skip_time(target) for _ in range(4)))
        assert [r.db_now_ms >= target for r in reports] == [True] * 4
        assert target <= await store.now_ms() < target + 60_000


async def test_explicit_sleep_with_auto_skipping_off() -> None:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES),
    ):
        env.auto_time_skipping = False
        handle = await env.client.start_workflow(WeekSleeper.run, id="manual", task_queue="q")
        await env.sleep(timedelta(days=3))
        assert (await handle.describe()).info.status == "running"
        await env.sleep(timedelta(days=4, seconds=1))
        assert await handle.result(timeout=10) >= WEEK.total_seconds()


async def test_start_local_runs_example_workflows() -> None:
    async with (
        await WorkflowEnvironment.start_local() as env,
        Worker(env.client, task_queue="q", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES),
    ):
        assert not env.supports_time_skipping
        assert env.address.startswith("127.0.0.1:")
        hello = await env.client.start_workflow(
            GoldenHello.run, "local", id="hello", task_queue="q"
        )
        signal = await env.client.start_workflow(GoldenSignal.run, id="sig", task_queue="q")
        await signal.signal(GoldenSignal.approve, "bob")
        assert await signal.result(timeout=10) == "approved: Hello, bob!"
        # GoldenHello's retry waits 30 real seconds here; only check it progressed.
        await asyncio.sleep(0.2)
        assert (await hello.describe()).info.status == "running"
        with pytest.raises(RuntimeError):
            env.auto_time_skipping = True


@pytest.mark.parametrize("skipping", [False, True])
async def test_shutdown_leaves_no_tasks_or_threads(skipping: bool) -> None:
    threads_before = set(threading.enumerate())
    tasks_before = asyncio.all_tasks()
    start = WorkflowEnvironment.start_time_skipping if skipping else WorkflowEnvironment.start_local
    env = await start()
    async with Worker(
        env.client, task_queue="q", workflows=ALL_WORKFLOWS, activities=ALL_ACTIVITIES
    ):
        handle = await env.client.start_workflow(WeekSleeper.run, id="bye", task_queue="q")
        if skipping:
            await handle.result(timeout=10)
    await env.shutdown()
    await env.shutdown()  # idempotent
    for _ in range(500):  # cancelled gRPC calls finish over a few loop iterations
        if not (tasks := asyncio.all_tasks() - tasks_before):
            break
        await asyncio.sleep(0.01)
    assert [t.get_name() for t in tasks] == []

    def ours() -> list[str]:
        extra = set(threading.enumerate()) - threads_before
        return sorted(t.name for t in extra if "sqlite" in t.name or "durable" in t.name)

    for _ in range(500):
        if not ours():
            break
        await asyncio.sleep(0.01)
    assert ours() == []


_blocker_started = asyncio.Event()
_blocker_release = asyncio.Event()


@activity.defn
async def blocker() -> str:
    _blocker_started.set()
    await _blocker_release.wait()
    return "released"


@workflow.defn(name="RunsBlocker")
class RunsBlocker:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(
            blocker, start_to_close_timeout=timedelta(seconds=30)
        )


async def test_no_skip_while_an_activity_runs() -> None:
    _blocker_started.clear()
    _blocker_release.clear()
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(
            env.client,
            task_queue="q",
            workflows=[WeekSleeper, RunsBlocker],
            activities=[blocker],
        ),
    ):
        running = await env.client.start_workflow(RunsBlocker.run, id="blocked", task_queue="q")
        await asyncio.wait_for(_blocker_started.wait(), 10)
        sleeper = await env.client.start_workflow(WeekSleeper.run, id="sleeper", task_queue="q")
        before = await env.now()
        await asyncio.sleep(0.3)
        # The leased activity holds the clock: the week-long timer has not fired.
        assert (await sleeper.describe()).info.status == "running"
        assert await env.now() - before < timedelta(seconds=30)
        _blocker_release.set()
        assert await running.result(timeout=10) == "released"
        assert await sleeper.result(timeout=10) >= WEEK.total_seconds()
