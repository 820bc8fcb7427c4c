"""The worker process of the web UI tests:

    python -m tests.ui.ui_app ADDRESS TASK_QUEUE [--namespace NS]

``TwoActivities`` runs two activities, the first failing its first attempt (the timeline
marks it), ``Approval`` waits for an ``approve`` signal and returns its value.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from datetime import timedelta

from durable_rpc import Client, RetryPolicy, Worker, activity, workflow
from tests.e2e.apps import serve


@activity.defn
async def flaky(name: str) -> str:
    if activity.info().attempt == 1:
        raise RuntimeError(f"first attempt of {name} fails")
    return f"flaky:{name}"


@activity.defn
async def steady(name: str) -> str:
    return f"steady:{name}"


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
        workflows=[TwoActivities, Approval],
        activities=[flaky, steady],
    )
    await serve(client, worker)


if __name__ == "__main__":
    asyncio.run(main())
