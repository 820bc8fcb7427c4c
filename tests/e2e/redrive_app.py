"""The worker process of the redrive test, before and after a bug fix:

    python -m tests.e2e.redrive_app ADDRESS TASK_QUEUE [--fixed]

``FourSteps`` runs activities 1-4 in turn. Without ``--fixed``, activity 3 fails for good
(a non-retryable error: the bug); with it, it succeeds (the fix). The workflow code is the
same in both, so both workers register the same definition fingerprint. Each execution
of an activity appends a line to $DURABLE_RPC_TEST_LOG (``tests.e2e.apps.record``) with
the key the workflow drew (``workflow.uuid4()``), so the test counts executions across
processes and sees which key each got.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from datetime import timedelta

from durable_rpc import (
    ApplicationError,
    CancellationToken,
    Client,
    Worker,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
    activity,
    workflow,
)
from tests.e2e.apps import record

FIXED = False


@activity.defn
async def order_step(order: str, n: int, key: str) -> str:
    record(f"order_step:{order}:{n} key={key}")
    if n == 3 and not FIXED:
        raise ApplicationError(f"step 3 of {order} is broken", "StepBug", non_retryable=True)
    return f"{order}: step {n} done"


@workflow.defn(name="FourSteps")
class FourSteps:
    @workflow.run
    async def run(self, order: str) -> list[str]:
        # Drawn before the first activity and handed to every step (an idempotency key):
        # a redriven run replaying the first decision must draw the same one.
        key = str(workflow.uuid4())
        done = []
        for n in range(1, 5):
            done.append(
                await workflow.execute_activity(
                    order_step, order, n, key, start_to_close_timeout=timedelta(seconds=10)
                )
            )
        return done


async def main() -> None:
    global FIXED
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    parser.add_argument("--fixed", action="store_true")
    args = parser.parse_args()
    FIXED = args.fixed
    client = await Client.connect(args.address)
    worker = Worker(
        client, task_queue=args.task_queue, workflows=[FourSteps], activities=[order_step]
    )
    token = CancellationToken()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, token.cancel)
    config = WorkflowSupervisorConfig(4).with_backoff(
        timedelta(milliseconds=50), timedelta(seconds=1)
    )
    print(await WorkflowSupervisor(worker, config).run(token), flush=True)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
