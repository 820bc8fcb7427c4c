"""Signal-with-start, wait_condition with a timeout, a Saga and a heartbeating activity.

Start a server (``durable-rpc server``), then run ``python examples/order_saga.py``.
Items are added with signal-with-start (the first one creates the order); the order
waits up to 2s for "checkout"; shipping fails, so payment and reservation are undone
in reverse order, each as a durable activity.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from durable_rpc import Client, Worker, activity, workflow

STEP = timedelta(seconds=10)


@activity.defn
async def reserve(items: list[str]) -> None:
    print("reserved", items)


@activity.defn
async def charge(items: list[str]) -> None:
    (done,) = activity.heartbeat_details(int) or (0,)  # resume after a retry
    for i in range(done, len(items)):
        activity.heartbeat(i + 1)  # progress; also how cancellation reaches us
    print("charged", items)


@activity.defn
async def ship(items: list[str]) -> None:
    raise activity.ApplicationError("carrier down", non_retryable=True)


@activity.defn
async def undo(step: str) -> None:
    print("undo", step)


@workflow.defn
class Order:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.ready = False

    @workflow.signal
    def add(self, item: str) -> None:
        self.ready = self.ready or item == "checkout"
        if item != "checkout":
            self.items.append(item)

    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.wait_condition(lambda: self.ready, timeout=2)
        except TimeoutError:
            return "abandoned"
        try:
            async with workflow.Saga() as saga:
                await workflow.execute_activity(reserve, self.items, start_to_close_timeout=STEP)
                saga.add(undo, "reserve")
                await workflow.execute_activity(charge, self.items, start_to_close_timeout=STEP)
                saga.add(undo, "charge")
                await workflow.execute_activity(ship, self.items, start_to_close_timeout=STEP)
        except workflow.ActivityError as exc:
            return f"rolled back: {exc.cause}"
        return "shipped"


async def main() -> None:
    client = await Client.connect()
    queue = f"orders-{uuid.uuid4().hex[:6]}"
    worker = Worker(
        client, task_queue=queue, workflows=[Order], activities=[reserve, charge, ship, undo]
    )
    async with worker:
        order_id = f"order-{uuid.uuid4().hex[:6]}"
        for item in ("book", "pen", "checkout"):
            handle = await client.signal_with_start_workflow(
                Order.run, id=order_id, task_queue=queue, signal=Order.add, signal_args=[item]
            )
        print(await handle.result(timeout=30))
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
