"""Namespace budgets (workflow.reserve()): grants in the decision's transaction, FIFO
waiters granted by a release or a run close, refusals with stable reasons, and the
budget's configuration (on every backend)."""

from __future__ import annotations

import asyncio

import pytest

from durable_rpc.errors import BudgetInUseError, InvalidArgumentError, NotFoundError
from durable_rpc.store import Budget, ClaimedWorkflowTask, Store
from durable_rpc.v1 import workflow_task_pb2
from tests.store.conftest import Backend
from tests.store.helpers import NS, claim, complete, events, history, kinds, start, wait_db_time

BUDGET = "llm-tokens"


def reserve(seq: int, amount: int, budget: str = BUDGET) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq, reserve_budget=workflow_task_pb2.ReserveBudget(budget=budget, amount=amount)
    )


def release(seq: int) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq, release_budget=workflow_task_pb2.ReleaseBudget(reservation_seq=seq)
    )


async def decide(
    store: Store, task: ClaimedWorkflowTask, commands: list[workflow_task_pb2.Command]
) -> None:
    await store.complete_workflow_task(NS, task.lease, len(task.events), commands)


async def first_tasks(store: Store, *workflow_ids: str) -> dict[str, ClaimedWorkflowTask]:
    run_ids = {await start(store, wid): wid for wid in workflow_ids}
    tasks = [await claim(store) for _ in workflow_ids]
    return {run_ids[t.run_id]: t for t in tasks}


async def budget(store: Store, name: str = BUDGET) -> Budget:
    (found,) = [b for b in await store.list_budgets(NS) if b.name == name]
    return found


def resolutions(raw: list[bytes]) -> list[tuple[str, int, str]]:
    """(kind, seq, reason) of the budget input events, in order."""
    out: list[tuple[str, int, str]] = []
    for e in events(raw):
        if e.HasField("budget_reserved"):
            out.append(("reserved", e.budget_reserved.seq, ""))
        elif e.HasField("budget_reserve_failed"):
            out.append(("failed", e.budget_reserve_failed.seq, e.budget_reserve_failed.reason))
    return out


async def test_a_reservation_that_fits_is_granted_in_its_decision(store: Store) -> None:
    await store.set_budget(NS, BUDGET, 5000)
    task = (await first_tasks(store, "a"))["a"]
    await decide(store, task, [reserve(1, 2000)])
    raw = await history(store, "a")
    # The command event, then the grant as the decision's input (it wakes the run).
    assert kinds(raw)[-3:] == [
        "workflow_task_completed",
        "budget_reservation_requested",
        "budget_reserved",
    ]
    requested = events(raw)[-2].budget_reservation_requested
    assert (requested.seq, requested.budget, requested.amount) == (1, BUDGET, 2000)
    assert (await budget(store)).held == 2000
    assert (await claim(store)).run_id == task.run_id


async def test_waiters_are_granted_fifo_by_a_release_and_wake_their_runs(store: Store) -> None:
    await store.set_budget(NS, BUDGET, 5000)
    tasks = await first_tasks(store, "a", "b", "c")
    await decide(store, tasks["a"], [reserve(1, 4000)])
    await decide(store, tasks["b"], [reserve(1, 2000)])  # 1000 free: waits
    await decide(store, tasks["c"], [reserve(1, 1000)])  # fits, but b waits first: waits
    assert resolutions(await history(store, "b")) == []
    assert resolutions(await history(store, "c")) == []
    described = await budget(store)
    assert (described.held, described.waiting, described.waiting_units) == (4000, 2, 3000)
    # describe names the budget, the amount of its capacity, what is held and who is ahead.
    assert (await store.describe(NS, "b", None)).stuck_reason == (
        "Waiting for budget llm-tokens (2000 of 5000; 4000 held)."
    )
    assert (await store.describe(NS, "c", None)).stuck_reason == (
        "Waiting for budget llm-tokens (1000 of 5000; 4000 held; 1 earlier reservation "
        "waits before it)."
    )
    # The gauge's count (durable_rpc.budget_reservations_waiting).
    assert (await store.metric_counts()).budget_waiting == {(NS, BUDGET): 2}
    # a's own task (its grant woke it) releases: b and c both fit now, in order.
    again = await claim(store)
    assert again.run_id == tasks["a"].run_id
    await decide(store, again, [release(1)])
    assert kinds(await history(store, "a"))[-1] == "budget_released"
    assert resolutions(await history(store, "b")) == [("reserved", 1, "")]
    assert resolutions(await history(store, "c")) == [("reserved", 1, "")]
    described = await budget(store)
    assert (described.held, described.waiting) == (3000, 0)
    assert (await store.metric_counts()).budget_waiting == {}
    woken = {(await claim(store)).run_id, (await claim(store)).run_id}
    assert woken == {tasks["b"].run_id, tasks["c"].run_id}


async def test_a_large_waiter_is_not_overtaken_and_capacity_is_never_exceeded(
    store: Store,
) -> None:
    await store.set_budget(NS, BUDGET, 10)
    tasks = await first_tasks(store, "a", "b", "c")
    await decide(store, tasks["a"], [reserve(1, 6), reserve(2, 3)])  # both granted: 9 held
    await decide(store, tasks["b"], [reserve(1, 8)])  # waits
    await decide(store, tasks["c"], [reserve(1, 1)])  # 1 free, but FIFO: waits behind b
    assert (await budget(store)).held == 9
    again = await claim(store)
    await decide(store, again, [release(2)])  # 4 free: b (8) still does not fit
    assert resolutions(await history(store, "c")) == []
    assert (await budget(store)).held == 6
    await store.terminate(NS, "a", None, "done")  # 10 free: b (8), then c (1)
    assert resolutions(await history(store, "b")) == [("reserved", 1, "")]
    assert resolutions(await history(store, "c")) == [("reserved", 1, "")]
    assert (await budget(store)).held == 9


async def test_a_run_closing_while_holding_releases_to_the_waiter(store: Store) -> None:
    await store.set_budget(NS, BUDGET, 5000)
    tasks = await first_tasks(store, "a", "b", "c")
    await decide(store, tasks["a"], [reserve(1, 5000)])
    await decide(store, tasks["b"], [reserve(1, 5000)])
    await decide(store, tasks["c"], [reserve(1, 5000)])
    # b, still waiting, is terminated: its waiting reservation goes with it.
    await store.terminate(NS, "b", None, "not needed")
    assert (await budget(store)).waiting == 1
    # a completes while holding: the close grants c in the same transaction.
    again = await claim(store)
    assert again.run_id == tasks["a"].run_id
    await decide(store, again, [complete(2)])
    assert resolutions(await history(store, "c")) == [("reserved", 1, "")]
    described = await budget(store)
    assert (described.held, described.waiting) == (5000, 0)
    assert (await claim(store)).run_id == tasks["c"].run_id


async def test_a_reservation_that_can_never_be_met_is_refused(store: Store) -> None:
    await store.set_budget(NS, BUDGET, 100)
    task = (await first_tasks(store, "a"))["a"]
    await decide(store, task, [reserve(1, 101), reserve(2, 5, budget="ghost")])
    assert resolutions(await history(store, "a")) == [
        ("failed", 1, "BUDGET_AMOUNT_EXCEEDS_CAPACITY"),
        ("failed", 2, "BUDGET_NOT_FOUND"),
    ]
    assert (await budget(store)).held == 0
    again = await claim(store)
    for bad in (reserve(3, 0), reserve(3, -5), reserve(3, 1, budget="")):
        with pytest.raises(InvalidArgumentError):
            await decide(store, again, [bad])


async def test_capacity_changes_grant_or_refuse_waiters_and_removal_needs_no_use(
    store: Store,
) -> None:
    await store.set_budget(NS, BUDGET, 10)
    tasks = await first_tasks(store, "a", "b", "c")
    await decide(store, tasks["a"], [reserve(1, 10)])
    await decide(store, tasks["b"], [reserve(1, 8)])
    await decide(store, tasks["c"], [reserve(1, 4)])
    # Lowered to 5: b's 8 can never fit (refused); c's 4 waits for a's units.
    lowered = await store.set_budget(NS, BUDGET, 5)
    assert (lowered.capacity, lowered.held, lowered.waiting) == (5, 10, 1)
    assert resolutions(await history(store, "b")) == [
        ("failed", 1, "BUDGET_AMOUNT_EXCEEDS_CAPACITY")
    ]
    with pytest.raises(BudgetInUseError):
        await store.remove_budget(NS, BUDGET)
    # Raised to 14: c fits beside a's 10.
    raised = await store.set_budget(NS, BUDGET, 14)
    assert (raised.held, raised.waiting) == (14, 0)
    assert resolutions(await history(store, "c")) == [("reserved", 1, "")]
    for workflow_id in ("a", "c"):
        await store.terminate(NS, workflow_id, None, "done")
    await store.remove_budget(NS, BUDGET)
    assert await store.list_budgets(NS) == []
    with pytest.raises(NotFoundError):
        await store.remove_budget(NS, BUDGET)
    for capacity in (0, -1, 10**15 + 1):
        with pytest.raises(InvalidArgumentError):
            await store.set_budget(NS, BUDGET, capacity)


async def test_two_stores_deciding_at_once_never_over_grant(durable_backend: Backend) -> None:
    """Two stores on one database (two server replicas) recording reservations of a
    one-unit budget at once: exactly one is granted (PostgreSQL: the grants serialize on
    the budget row's lock; without it both see the unit free), and each close hands the
    unit to exactly one waiter."""
    first, second = durable_backend.make(), durable_backend.make()
    await first.open()
    await second.open()
    try:
        await first.set_budget(NS, BUDGET, 1)
        ids = [f"r{i}" for i in range(12)]
        tasks = list((await first_tasks(first, *ids)).items())
        await asyncio.gather(
            *(
                decide(first if i % 2 else second, task, [reserve(1, 1)])
                for i, (_, task) in enumerate(tasks)
            )
        )

        closed: set[str] = set()
        for turn in range(len(ids)):
            granted = [wid for wid in ids if resolutions(await history(first, wid))]
            assert len(granted) == turn + 1
            (holder,) = [wid for wid in granted if wid not in closed]
            assert (await budget(first)).held == 1
            # The holder closes (on either store): the unit goes to exactly one waiter.
            await (first if turn % 2 else second).terminate(NS, holder, None, "done")
            closed.add(holder)
        assert (await budget(first)).held == 0
    finally:
        await first.close()
        await second.close()


def granted_at(raw: list[bytes]) -> int:
    (event,) = [e for e in events(raw) if e.HasField("budget_reserved")]
    return event.event_time.ToMilliseconds()


async def test_a_refilling_budget_gives_released_units_back_at_its_rate(store: Store) -> None:
    # 1000 units a minute: what a releases is spent, not back at once.
    await store.set_budget(NS, BUDGET, 1000, refill_units=1000, refill_period_ms=60_000)
    tasks = await first_tasks(store, "a", "b")
    await decide(store, tasks["a"], [reserve(1, 1000)])
    again = await claim(store)
    assert again.run_id == tasks["a"].run_id
    await decide(store, again, [release(1)])
    await decide(store, tasks["b"], [reserve(1, 600)])
    assert resolutions(await history(store, "b")) == []
    described = await budget(store)
    assert (described.held, described.waiting, described.refill_units) == (0, 1, 1000)
    assert described.refilling > 400  # 600 back takes 36 s at this rate
    # A faster rate applies from now to what is still coming back: 1000 per 300 ms, so
    # the 600 b needs are back 180 ms (of database time) later, granted by the due pass.
    changed = await store.set_budget(NS, BUDGET, 1000, refill_units=1000, refill_period_ms=300)
    changed_at = changed.updated_at_ms
    if not resolutions(await history(store, "b")):
        report = await store.process_due()
        assert report.next_due_ms is not None and report.next_due_ms <= changed_at + 180
        await wait_db_time(store, changed_at + 180)
        await store.process_due()
    assert resolutions(await history(store, "b")) == [("reserved", 1, "")]
    assert granted_at(await history(store, "b")) >= changed_at + 180 - 400 * 300 // 1000
    assert (await claim(store)).run_id == tasks["b"].run_id
    assert (await budget(store)).held == 600


async def test_a_run_closing_while_holding_spends_a_refilling_budgets_units(
    store: Store,
) -> None:
    await store.set_budget(NS, BUDGET, 1000, refill_units=1, refill_period_ms=3_600_000)
    tasks = await first_tasks(store, "a", "b")
    await decide(store, tasks["a"], [reserve(1, 1000)])
    await decide(store, tasks["b"], [reserve(1, 1000)])
    again = await claim(store)
    assert again.run_id == tasks["a"].run_id
    await decide(store, again, [complete(2)])
    # Without the refill the close would have granted b at once (the test above this
    # one's sibling); with it, the 1000 units come back at 1 an hour.
    assert resolutions(await history(store, "b")) == []
    described = await budget(store)
    assert (described.held, described.waiting, described.refilling) == (0, 1, 1000)
    # No refill any more: the spent units are back at once and b is granted.
    await store.set_budget(NS, BUDGET, 1000)
    assert resolutions(await history(store, "b")) == [("reserved", 1, "")]


@pytest.mark.parametrize(
    ("units", "period_ms"), [(1, 0), (0, 1000), (-1, 1000), (1, 32 * 24 * 3600 * 1000)]
)
async def test_a_bad_refill_is_refused(store: Store, units: int, period_ms: int) -> None:
    with pytest.raises(InvalidArgumentError, match="refill must be") as raised:
        await store.set_budget(NS, BUDGET, 10, refill_units=units, refill_period_ms=period_ms)
    assert raised.value.reason == "INVALID_ARGUMENT"
