"""The worker process of the web UI tests:

    python -m tests.ui.ui_app ADDRESS TASK_QUEUE [--namespace NS]

``TwoActivities`` runs two activities, the first failing its first attempt (the timeline
marks it), ``Approval`` waits for an ``approve`` signal and returns its value,
``Resumable``'s activity heartbeats its progress, then fails and waits a minute to retry,
``Broken`` fails for good at its second activity (a run to redrive).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from datetime import timedelta

from durable_rpc import ApplicationError, Client, RetryPolicy, Worker, activity, workflow
from tests.e2e.apps import serve


@activity.defn
async def flaky(name: str) -> str:
    if activity.info().attempt == 1:
        raise RuntimeError(f"first attempt of {name} fails")
    return f"flaky:{name}"


@activity.defn
async def steady(name: str) -> str:
    return f"steady:{name}"


@activity.defn
async def copy_rows(rows: int) -> str:
    # Heartbeat for longer than the heartbeat interval (half the 1 s timeout), so the
    # details reach the server before the attempt fails.
    for _ in range(7):
        activity.heartbeat(f"row 41 of {rows}")
        await asyncio.sleep(0.2)
    raise RuntimeError("the target table is locked")


@workflow.defn(name="Resumable")
class Resumable:
    @workflow.run
    async def run(self, rows: int) -> str:
        return await workflow.execute_activity(
            copy_rows,
            rows,
            start_to_close_timeout=timedelta(seconds=10),
            heartbeat_timeout=timedelta(seconds=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=60)),
        )


@activity.defn
async def broken_step(name: str) -> str:
    raise ApplicationError(f"{name} is broken", "StepBug", non_retryable=True)


@workflow.defn(name="Broken")
class Broken:
    """Fails for good at its second activity: a run to redrive."""

    @workflow.run
    async def run(self, name: str) -> str:
        await workflow.execute_activity(steady, name, start_to_close_timeout=timedelta(seconds=10))
        return await workflow.execute_activity(
            broken_step, name, start_to_close_timeout=timedelta(seconds=10)
        )


@workflow.defn(name="TwoActivities")
class TwoActivities:
    @workflow.run
    async def run(self, name: str) -> list[str]:
        first = await workflow.execute_activity(
            flaky,
            name,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
        )
        second = await workflow.execute_activity(
            steady, name, start_to_close_timeout=timedelta(seconds=10)
        )
        return [first, second]


@workflow.defn(name="Approval")
class Approval:
    def __init__(self) -> None:
        self.value: str | None = None

    @workflow.signal
    async def approve(self, value: str) -> None:
        self.value = value

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.value is not None)
        return f"approved:{self.value}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--api-key-env", default=None)
    args = parser.parse_args()
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    client = await Client.connect(args.address, namespace=args.namespace, api_key=key)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[TwoActivities, Approval, Resumable, Broken],
        activities=[flaky, steady, copy_rows, broken_step],
    )
    await serve(client, worker)


if __name__ == "__main__":
    asyncio.run(main())
