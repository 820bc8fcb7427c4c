"""The worker process of the budget tests (tests/e2e/test_budgets.py):

    python -m tests.e2e.budget_app ADDRESS TASK_QUEUE

``Reserving`` reserves ``amount`` units of the ``llm-tokens`` budget, then runs
``branches`` parallel ``spend`` activities inside the reservation, each using an equal
share of it, and, when asked, holds the reservation until its ``go`` signal. Each
``spend`` execution appends a start and an end line (with its units) to
$DURABLE_RPC_TEST_LOG (``tests.e2e.apps.record``), in real-time order, so a test can
measure the units in use at every moment from the activities themselves.
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

BUDGET = "llm-tokens"


@activity.defn
async def spend(tag: str, units: int, seconds: float) -> int:
    record(f"spend-start:{tag}:{units}")
    await asyncio.sleep(seconds)
    record(f"spend-end:{tag}:{units}")
    return units


@workflow.defn(name="Reserving")
class Reserving:
    def __init__(self) -> None:
        self.go = False
        self.holding = False

    @workflow.signal
    def release(self) -> None:
        self.go = True

    @workflow.query
    def is_holding(self) -> bool:
        return self.holding

    @workflow.run
    async def run(self, tag: str, amount: int, branches: int, seconds: float, hold: bool) -> int:
        async with workflow.reserve(BUDGET, amount):
            self.holding = True
            if hold:
                await workflow.wait_condition(lambda: self.go)
            spent = await asyncio.gather(
                *(
                    workflow.execute_activity(
                        spend,
                        f"{tag}-{i}",
                        amount // branches,
                        seconds,
                        start_to_close_timeout=timedelta(seconds=30),
                    )
                    for i in range(branches)
                )
            )
        self.holding = False
        return sum(spent)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    args = parser.parse_args()
    client = await Client.connect(args.address)
    worker = Worker(client, task_queue=args.task_queue, workflows=[Reserving], activities=[spend])
    await serve(client, worker)


if __name__ == "__main__":
    asyncio.run(main())
