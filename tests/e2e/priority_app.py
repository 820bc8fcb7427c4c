"""The worker process of the priority test (tests/e2e/test_priority.py):

    python -m tests.e2e.priority_app ADDRESS TASK_QUEUE

One workflow task and one activity at a time (a supervisor of one slot, one activity
slot), so the order the activities run in is the order the server hands out the
tasks. ``Marked`` runs one ``mark`` activity, which appends ``mark:<tag>`` to
$DURABLE_RPC_TEST_LOG (``tests.e2e.apps.record``); ``MarkedFanout`` schedules ``mark``
activities of their own priorities.
"""

from __future__ import annotations

import argparse
import asyncio
from datetime import timedelta

from durable_rpc import (
    Client,
    Worker,
    activity,
    workflow,
)
from tests.e2e.apps import record, serve


@activity.defn
async def mark(tag: str) -> str:
    record(f"mark:{tag}")
    return tag


@workflow.defn(name="Marked")
class Marked:
    @workflow.run
    async def run(self, tag: str) -> str:
        return await workflow.execute_activity(
            mark, tag, start_to_close_timeout=timedelta(seconds=60)
        )


@workflow.defn(name="MarkedFanout")
class MarkedFanout:
    """``count`` priority-5 activities, then one of priority 1, in one decision."""

    @workflow.run
    async def run(self, count: int) -> list[str]:
        timeout = timedelta(seconds=60)
        calls = [
            workflow.execute_activity(
                mark, f"batch-{i}", start_to_close_timeout=timeout, priority=5
            )
            for i in range(count)
        ]
        calls.append(
            workflow.execute_activity(mark, "urgent", start_to_close_timeout=timeout, priority=1)
        )
        return list(await asyncio.gather(*calls))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    args = parser.parse_args()
    client = await Client.connect(args.address)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[Marked, MarkedFanout],
        activities=[mark],
        max_concurrent_activities=1,
    )
    await serve(client, worker, cycles=1)


if __name__ == "__main__":
    asyncio.run(main())
