"""Workflows and activities for tests/features/test_select_and_local.py, runnable as a
worker process:

    python -m tests.features.select_apps ADDRESS TASK_QUEUE

Activities append one line per execution to $DURABLE_RPC_TEST_LOG.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta

from durable_rpc import (
    CancellationToken,
    Client,
    RetryPolicy,
    Worker,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
    activity,
    workflow,
)
from tests.e2e.apps import record

SECOND = timedelta(seconds=1)


@activity.defn
async def quick(tag: str) -> str:
    record(f"quick:{tag}")
    return tag


@activity.defn
async def never_runs() -> str:
    record("never_runs ran")
    return "never"


@activity.defn
async def waits_for_cancel() -> str:
    record("waits_for_cancel started")
    try:
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        record("waits_for_cancel cancelled")
        raise


@activity.defn
async def finishes_anyway() -> str:
    record("finishes_anyway started")
    try:
        while True:
            activity.heartbeat()
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        record("finishes_anyway finishing despite cancel")
    return "done anyway"


def _nobody_queue() -> str:
    return f"{workflow.info().task_queue}-nobody"


@workflow.defn(name="SelectQueued")
class SelectQueued:
    """select(): the quick activity wins; the loser is queued where nobody polls."""

    @workflow.run
    async def run(self) -> str:
        winner: str = await workflow.select(
            workflow.execute_activity(quick, "winner", start_to_close_timeout=10 * SECOND),
            workflow.execute_activity(
                never_runs, start_to_close_timeout=10 * SECOND, task_queue=_nobody_queue()
            ),
        )
        return winner


@workflow.defn(name="CancelQueued")
class CancelQueued:
    """Cancelling the task awaiting a queued activity: CancelledError once cancelled
    (WAIT_CANCELLATION_COMPLETED: the await waits for the ActivityCancelled outcome)."""

    @workflow.run
    async def run(self) -> str:
        task = asyncio.ensure_future(
            workflow.execute_activity(
                never_runs,
                start_to_close_timeout=10 * SECOND,
                task_queue=_nobody_queue(),
                cancellation=workflow.CancellationPolicy.WAIT_CANCELLATION_COMPLETED,
            )
        )
        await workflow.sleep(0.2)
        task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            return "cancelled"


@workflow.defn(name="CancelRunning")
class CancelRunning:
    """Cancel a running activity: the cancel reaches it through its heartbeats, and the
    await waits for its outcome (WAIT_CANCELLATION_COMPLETED)."""

    @workflow.run
    async def run(self, which: str) -> str:
        fn = waits_for_cancel if which == "obeys" else finishes_anyway
        task = asyncio.ensure_future(
            workflow.execute_activity(
                fn,
                start_to_close_timeout=60 * SECOND,
                heartbeat_timeout=2 * SECOND,
                cancellation=workflow.CancellationPolicy.WAIT_CANCELLATION_COMPLETED,
            )
        )
        await workflow.sleep(1.5)
        task.cancel()
        try:
            return "result:" + await task
        except asyncio.CancelledError:
            return "cancelled"


@workflow.defn(name="SelectFinished")
class SelectFinished:
    """select() over activities that all finished: the first wins, none is cancelled
    and the loser keeps its result."""

    @workflow.run
    async def run(self) -> list[str]:
        first = asyncio.ensure_future(
            workflow.execute_activity(quick, "first", start_to_close_timeout=10 * SECOND)
        )
        second = asyncio.ensure_future(
            workflow.execute_activity(quick, "second", start_to_close_timeout=10 * SECOND)
        )
        await workflow.sleep(1.0)
        winner: str = await workflow.select(first, second)
        return [winner, await second]


@workflow.defn(name="Gathered")
class Gathered:
    """asyncio.gather of activities and a timer: deterministic, replayable."""

    @workflow.run
    async def run(self) -> list[str]:
        results = await asyncio.gather(
            workflow.execute_activity(quick, "a", start_to_close_timeout=10 * SECOND),
            workflow.sleep(0.1),
            workflow.execute_activity(quick, "b", start_to_close_timeout=10 * SECOND),
        )
        return [results[0], results[2]]


# --- local activities -------------------------------------------------------------------

_local_attempts: dict[str, int] = {}


@activity.defn
def count_local(tag: str) -> str:
    record(f"local:{tag}")
    return f"local {tag}"


@activity.defn
async def flaky_local(tag: str) -> int:
    attempt = _local_attempts[tag] = _local_attempts.get(tag, 0) + 1
    record(f"flaky_local:{tag} attempt={attempt}")
    if tag == "fatal" or attempt < 3:
        raise RuntimeError(f"attempt {attempt} failed")
    return attempt


@workflow.defn(name="LocalOnce")
class LocalOnce:
    """A local activity, then a wait for signal "go" (a later workflow task replays the
    recorded result instead of running the function again)."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def release(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, tag: str) -> str:
        value: str = await workflow.execute_local_activity(
            count_local, tag, start_to_close_timeout=5 * SECOND
        )
        await workflow.wait_condition(lambda: self.go)
        after = await workflow.execute_activity(quick, "after", start_to_close_timeout=10 * SECOND)
        return f"{value}/{after}"


@workflow.defn(name="LocalRetry")
class LocalRetry:
    @workflow.run
    async def run(self, tag: str) -> str:
        policy = RetryPolicy(initial_interval=timedelta(milliseconds=50), maximum_attempts=4)
        try:
            attempts: int = await workflow.execute_local_activity(
                flaky_local, tag, start_to_close_timeout=5 * SECOND, retry_policy=policy
            )
        except workflow.ActivityError as error:
            return f"failed after {error.attempt}: {error.cause}"
        return f"ok on attempt {attempts}"


WORKFLOWS = [
    SelectQueued,
    CancelQueued,
    CancelRunning,
    SelectFinished,
    Gathered,
    LocalOnce,
    LocalRetry,
]
ACTIVITIES = [quick, never_runs, waits_for_cancel, finishes_anyway]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    args = parser.parse_args()
    client = await Client.connect(args.address)
    worker = Worker(client, task_queue=args.task_queue, workflows=WORKFLOWS, activities=ACTIVITIES)
    token = CancellationToken()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, token.cancel)
    config = WorkflowSupervisorConfig(8).with_backoff(
        timedelta(milliseconds=50), timedelta(seconds=1)
    )
    print(await WorkflowSupervisor(worker, config).run(token), flush=True)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
