"""Local activities' schedule-to-close and heartbeat timeouts and their attempt log, on a
real server and worker (WorkflowEnvironment; local activities run on the worker's own
clock, so the timeouts here are short real durations): schedule_to_close bounds all
attempts together, an attempt that stops calling activity.heartbeat() fails with a
heartbeat timeout and is retried, and every attempt's outcome is recorded in the
local_activity marker's details, visible in the history."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

from durable_rpc import Worker, activity, converter, workflow
from durable_rpc.testing import WorkflowEnvironment
from durable_rpc.v1 import history_pb2
from durable_rpc.workflow import ActivityError, RetryPolicy

pytestmark = pytest.mark.timeout(60)

#: Set at teardown: releases the hung attempts' abandoned threads.
RELEASE = threading.Event()
ATTEMPTS: list[int] = []


@pytest.fixture(autouse=True)
def _release_hung_attempts() -> Any:
    RELEASE.clear()
    ATTEMPTS.clear()
    yield
    RELEASE.set()


@activity.defn
def always_fails() -> str:
    ATTEMPTS.append(activity.info().attempt)
    raise ValueError(f"attempt {activity.info().attempt} broke")


@activity.defn
def hangs() -> str:
    RELEASE.wait(30)
    return "late"


@activity.defn
def stops_heartbeating() -> str:
    attempt = activity.info().attempt
    ATTEMPTS.append(attempt)
    for _ in range(3):
        activity.heartbeat(attempt)
    if attempt == 1:
        RELEASE.wait(30)  # hangs without heartbeating: the heartbeat timeout ends it
    return f"done on attempt {attempt}"


@activity.defn
async def beats_async(n: int) -> int:
    for i in range(n):
        activity.heartbeat(i)
    return activity.info().attempt


@workflow.defn(name="LocalTimeouts")
class LocalTimeouts:
    @workflow.run
    async def run(self, case: str) -> str:
        try:
            if case == "retries-bounded":
                return await workflow.execute_local_activity(
                    always_fails,
                    # Room for a few attempts even on a loaded machine.
                    schedule_to_close_timeout=timedelta(seconds=1),
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(milliseconds=100), backoff_coefficient=1.0
                    ),
                )
            if case == "hang":
                return await workflow.execute_local_activity(
                    hangs, schedule_to_close_timeout=timedelta(milliseconds=300)
                )
            if case == "heartbeat":
                return await workflow.execute_local_activity(
                    stops_heartbeating,
                    # Wide enough that a loaded machine still starts attempt 2 in time.
                    heartbeat_timeout=timedelta(seconds=1),
                    retry_policy=RetryPolicy(
                        initial_interval=timedelta(milliseconds=10), maximum_attempts=2
                    ),
                )
            if case == "async":
                return str(
                    await workflow.execute_local_activity(
                        beats_async, 3, heartbeat_timeout=timedelta(seconds=5)
                    )
                )
        except ActivityError as error:
            return f"{error.cause.type}: {error.cause.message}"
        raise AssertionError(case)


async def run(case: str) -> tuple[str, list[dict[str, Any]]]:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(
            env.client,
            task_queue="q",
            workflows=[LocalTimeouts],
            activities=[always_fails, hangs, stops_heartbeating, beats_async],
        ),
    ):
        handle = await env.client.start_workflow(
            LocalTimeouts.run, case, id=f"la-{uuid.uuid4().hex[:6]}", task_queue="q"
        )
        result = await handle.result(timeout=30)
        history = history_pb2.History(events=await handle.history())
    markers = [
        e.marker_recorded for e in history.events if e.marker_recorded.kind == "local_activity"
    ]
    assert len(markers) == 1
    assert markers[0].HasField("details"), "the attempt log is recorded with the marker"
    return result, converter.decode(markers[0].details.data)


async def test_schedule_to_close_bounds_all_attempts() -> None:
    result, attempts = await run("retries-bounded")
    assert result.startswith("LocalActivityTimeoutError: ") or result.startswith("ValueError: ")
    assert len(attempts) == len(ATTEMPTS) >= 2, "retried within the bound, then stopped"
    assert [a["attempt"] for a in attempts] == list(range(1, len(attempts) + 1))
    assert all(a["outcome"] == "failed" for a in attempts[:-1])
    assert attempts[0]["type"] == "ValueError"


async def test_schedule_to_close_ends_a_hung_attempt() -> None:
    result, attempts = await run("hang")
    assert result == (
        "LocalActivityTimeoutError: local activity 'hangs' passed its "
        "schedule_to_close timeout (0.3s)"
    )
    assert [(a["attempt"], a["outcome"], a["type"]) for a in attempts] == [
        (1, "timed_out", "LocalActivityTimeoutError")
    ]


async def test_an_attempt_that_stops_heartbeating_times_out_and_is_retried() -> None:
    result, attempts = await run("heartbeat")
    assert result == "done on attempt 2"
    assert ATTEMPTS == [1, 2]
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "timed_out"), (2, "completed")]
    assert "heartbeat timeout" in attempts[0]["message"]


async def test_heartbeat_and_info_work_in_an_async_local_activity() -> None:
    result, attempts = await run("async")
    assert result == "1"
    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "completed")]
    assert isinstance(attempts[0]["duration_ms"], int)


@pytest.mark.parametrize("option", ["schedule_to_close_timeout", "heartbeat_timeout"])
def test_a_non_positive_timeout_is_refused(option: str) -> None:
    from durable_rpc.worker._workflow_task import replay
    from durable_rpc.workflow._definition import definition_of
    from tests.testing.test_markers import _started_history

    @workflow.defn(name="BadLocal")
    class BadLocal:
        @workflow.run
        async def run(self) -> None:
            await workflow.execute_local_activity(hangs, **{option: timedelta(0)})

    definition = definition_of(BadLocal)
    commands = replay(definition, _started_history(definition.name), 0, task_queue="q")
    assert [c.WhichOneof("kind") for c in commands] == ["fail_workflow"]
    failure = commands[0].fail_workflow.failure
    assert failure.type == "ValueError" and option in failure.message
