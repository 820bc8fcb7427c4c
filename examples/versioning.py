"""Side effects and versioning: change workflow code while old runs are still open.

``workflow.side_effect(fn)`` records a small non-deterministic value once (replays return
the recorded value); ``workflow.patched(change_id)`` lets new runs take new code while
histories recorded before the change keep replaying the old branch.

Runs on the in-process time-skipping environment (no server needed):
``python examples/versioning.py``. It records a run of the old code, replays that
history against the patched code (old branch), then runs the patched code (new branch).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from durable_rpc import Worker, activity, workflow
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import history_pb2


@activity.defn
async def charge(order_id: str, amount: int) -> str:
    return f"charged {amount} for {order_id}"


@activity.defn
async def charge_with_receipt(order_id: str, amount: int) -> str:
    return f"charged {amount} for {order_id}, receipt sent"


@workflow.defn(name="Checkout")
class CheckoutV1:
    @workflow.run
    async def run(self, amount: int) -> str:
        # uuid.uuid4() is refused in workflow code; inside side_effect it runs once.
        order_id = workflow.side_effect(lambda: uuid.uuid4().hex[:8])
        await workflow.sleep(timedelta(hours=1))
        return await workflow.execute_activity(
            charge, order_id, amount, start_to_close_timeout=timedelta(seconds=10)
        )


@workflow.defn(name="Checkout")
class CheckoutV2:
    """The change: charge_with_receipt, behind patched() for runs started before it."""

    @workflow.run
    async def run(self, amount: int) -> str:
        order_id = workflow.side_effect(lambda: uuid.uuid4().hex[:8])
        await workflow.sleep(timedelta(hours=1))
        if workflow.patched("receipt"):
            return await workflow.execute_activity(
                charge_with_receipt, order_id, amount, start_to_close_timeout=timedelta(seconds=10)
            )
        return await workflow.execute_activity(
            charge, order_id, amount, start_to_close_timeout=timedelta(seconds=10)
        )


async def run_once(cls: type, amount: int) -> tuple[str, history_pb2.History]:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(
            env.client, task_queue="shop", workflows=[cls], activities=[charge, charge_with_receipt]
        ),
    ):
        handle = await env.client.start_workflow(
            "Checkout", amount, id=f"checkout-{uuid.uuid4().hex[:8]}", task_queue="shop"
        )
        result = await handle.result()
        return result, history_pb2.History(events=await handle.history())


async def main() -> None:
    old_result, old_history = await run_once(CheckoutV1, 42)
    print("old code:        ", old_result)
    replayed = Replayer([CheckoutV2]).replay(old_history, source="old run")
    print("patched replay:  ", replayed.describe())
    new_result, _ = await run_once(CheckoutV2, 42)
    print("patched new run: ", new_result)


if __name__ == "__main__":
    asyncio.run(main())
