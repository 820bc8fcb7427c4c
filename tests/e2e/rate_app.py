"""The worker process of the rate-limit tests (tests/e2e/test_rate_limits.py):

    python -m tests.e2e.rate_app ADDRESS TASK_QUEUE

``Fanout`` schedules ``count`` ``call_downstream`` activities at once, by function
reference, so each carries the activity's ``rate_limit_key`` ("downstream"). Each
execution appends a start line with its wall-clock time to $DURABLE_RPC_TEST_LOG
(``tests.e2e.apps.record``), so a test counts the starts in a window from the
activities themselves, across worker processes.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta

from durable_rpc import (
    Client,
    Worker,
    activity,
    workflow,
)
from tests.e2e.apps import record, serve

KEY = "downstream"


@activity.defn(rate_limit_key=KEY)
async def call_downstream(tag: str) -> str:
    record(f"call-start:{tag}:{time.time():.6f}")
    return tag


@workflow.defn(name="Fanout")
class Fanout:
    @workflow.run
    async def run(self, tag: str, count: int) -> int:
        done = await asyncio.gather(
            *(
                workflow.execute_activity(
                    call_downstream, f"{tag}-{i}", start_to_close_timeout=timedelta(seconds=60)
                )
                for i in range(count)
            )
        )
        return len(done)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    args = parser.parse_args()
    client = await Client.connect(args.address)
    worker = Worker(
        client, task_queue=args.task_queue, workflows=[Fanout], activities=[call_downstream]
    )
    await serve(client, worker)


if __name__ == "__main__":
    asyncio.run(main())
