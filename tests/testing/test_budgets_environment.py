"""The time-skipping environment with runs that reserve from a budget: a run waiting
for the budget holds no task, so the clock jumps over the holder's sleep and the
waiter is granted when the holder releases."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durable_rpc import Worker, workflow
from durable_rpc.testing import WorkflowEnvironment
from durable_rpc.v1 import admin_service_pb2 as pb

HOUR = timedelta(hours=1)


@workflow.defn(name="BadReservations")
class BadReservations:
    @workflow.run
    async def run(self) -> list[str]:
        """What each bad reservation raised, in order."""
        seen: list[str] = []
        for amount in (0, -3):
            try:
                async with workflow.reserve("gpu", amount):
                    pass
            except ValueError as error:
                seen.append(f"ValueError: {error}")
        for budget, amount in (("ghost", 1), ("gpu", 2)):
            try:
                async with workflow.reserve(budget, amount):
                    pass
            except workflow.BudgetError as error:
                seen.append(f"{error.reason} {error.budget} {error.amount}")
        return seen


@workflow.defn(name="HourHolder")
class HourHolder:
    @workflow.run
    async def run(self) -> tuple[float, float]:
        """(when it was granted, when it released), in seconds of workflow time."""
        async with workflow.reserve("gpu", 1):
            granted = workflow.now().timestamp()
            await workflow.sleep(HOUR)
            return granted, workflow.now().timestamp()


async def test_reservations_wait_and_are_granted_under_time_skipping() -> None:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[HourHolder]),
    ):
        await env.client.call(
            env.client.admin_service.SetBudget, pb.SetBudgetRequest(name="gpu", capacity=1)
        )
        handles = [
            await env.client.start_workflow(HourHolder.run, id=f"holder-{i}", task_queue="q")
            for i in range(2)
        ]
        spans = sorted(await asyncio.gather(*(h.result(timeout=10) for h in handles)))
    # One at a time: the second is granted no earlier than the first released, an
    # hour of skipped time later.
    (first_granted, first_released), (second_granted, second_released) = spans
    assert first_released - first_granted >= HOUR.total_seconds()
    assert second_granted >= first_released
    assert second_released - second_granted >= HOUR.total_seconds()


async def test_bad_reservations_raise_at_once() -> None:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[BadReservations]),
    ):
        await env.client.call(
            env.client.admin_service.SetBudget, pb.SetBudgetRequest(name="gpu", capacity=1)
        )
        handle = await env.client.start_workflow(BadReservations.run, id="bad", task_queue="q")
        assert await handle.result(timeout=10) == [
            "ValueError: a reservation's amount must be an int > 0, got 0",
            "ValueError: a reservation's amount must be an int > 0, got -3",
            "BUDGET_NOT_FOUND ghost 1",
            "BUDGET_AMOUNT_EXCEEDS_CAPACITY gpu 2",
        ]
