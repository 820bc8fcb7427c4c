"""A tour of the programming model, in one runnable file (no server needed).

    python examples/tour.py

Runs on durable_rpc.testing's time-skipping environment (an in-process server on an
in-memory store): the day-long timers below take milliseconds. Every feature shown works
the same against `durable-rpc server`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

from durable_rpc import Worker, activity, workflow
from durable_rpc.testing import WorkflowEnvironment

TIMEOUT = timedelta(seconds=10)


@dataclass
class Order:
    id: str
    cents: int


@activity.defn
async def charge(order: Order) -> str:
    return f"charged {order.cents} for {order.id}"


@activity.defn
async def slow_quote(supplier: str) -> int:
    # A long call; the workflow races it against a fast one and cancels the loser.
    await asyncio.sleep(3600)
    return 0


@activity.defn
async def fast_quote(supplier: str) -> int:
    return 42


def tax_rate() -> float:
    return 0.2


@workflow.defn
class Shipment:
    """A child workflow."""

    @workflow.run
    async def run(self, order: Order) -> str:
        await workflow.sleep(timedelta(days=2))  # durable timer, skipped in tests
        return f"shipped {order.id}"


@workflow.defn
class Counter:
    """Continue-as-new: each run counts to `stop` in chunks, with a fresh history."""

    @workflow.run
    async def run(self, count: int, stop: int) -> int:
        if count < stop:
            workflow.continue_as_new(count + 10, stop)
        return count


@workflow.defn
class OrderFlow:
    def __init__(self) -> None:
        self.approved_by: str | None = None
        self.status = "new"

    @workflow.query
    def current_status(self) -> str:  # read-only, never recorded in history
        return self.status

    @workflow.update
    async def approve(self, approver: str) -> str:
        self.approved_by = approver
        return f"approved by {approver}"

    @approve.validator
    def check_approver(self, approver: str) -> None:  # a rejection leaves no trace
        if not approver:
            raise ValueError("an approver is required")

    @workflow.run
    async def run(self, order: Order) -> dict[str, object]:
        workflow.upsert_search_attributes({"Stage": "awaiting-approval"})
        self.status = "awaiting approval"
        await workflow.wait_condition(lambda: self.approved_by is not None)
        rate = workflow.side_effect(tax_rate)  # recorded once, replayed after
        if workflow.patched("quote-race"):  # new code path, old histories keep the old
            quote = await workflow.select(
                workflow.execute_activity(slow_quote, "a", start_to_close_timeout=TIMEOUT),
                workflow.execute_activity(fast_quote, "b", start_to_close_timeout=TIMEOUT),
            )
        else:
            quote = 0
        receipt = await workflow.execute_local_activity(
            lambda: f"local note for {order.id}", start_to_close_timeout=TIMEOUT
        )
        charged = await workflow.execute_activity(charge, order, start_to_close_timeout=TIMEOUT)
        shipped = await workflow.execute_child_workflow(Shipment.run, order, id=f"ship-{order.id}")
        self.status = "done"
        workflow.upsert_search_attributes({"Stage": "done"})
        return {
            "rate": rate,
            "quote": quote,
            "receipt": receipt,
            "charged": charged,
            "shipped": shipped,
        }


async def main() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        client = env.client
        async with Worker(
            client,
            task_queue="tour",
            workflows=[OrderFlow, Shipment, Counter],
            activities=[charge, slow_quote, fast_quote],
        ):
            handle = await client.start_workflow(
                OrderFlow.run,
                Order("o-1", 1999),
                id="order-o-1",
                task_queue="tour",
                search_attributes={"CustomerId": "c-7"},
            )
            print("query:", await handle.query(OrderFlow.current_status))
            print("update:", await handle.execute_update(OrderFlow.approve, "ada"))
            print("result:", await handle.result())
            matches = [w.workflow_id async for w in client.list_workflows('CustomerId = "c-7"')]
            print("list CustomerId = c-7:", matches)
            counter = await client.start_workflow(Counter.run, 0, 30, id="c", task_queue="tour")
            print("continue-as-new chain result:", await counter.result())


if __name__ == "__main__":
    asyncio.run(main())
