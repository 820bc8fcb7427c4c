"""Describe's stuck reason: one sentence for an open run that makes no progress, read
from its task rows on the database clock (the e2e twin: tests/e2e/test_fleet.py)."""

from __future__ import annotations

import re

from durable_rpc.store import Store
from tests.store.helpers import (
    NS,
    QUEUE,
    activity_options,
    claim,
    complete,
    failure,
    schedule,
    start,
    timer,
)

#: describe's times: ISO 8601 UTC to the millisecond.
AT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


async def reason(store: Store, workflow_id: str = "wf-1") -> str:
    return (await store.describe(NS, workflow_id, None)).stuck_reason


async def register(store: Store, worker: str = "w1", activities: tuple[str, ...] = ()) -> None:
    await store.register_worker(
        NS, worker, QUEUE, [("Order", "1", "fp-1")], list(activities), "", False
    )


async def test_a_queued_workflow_task_with_a_live_worker_is_progress(store: Store) -> None:
    await start(store)
    assert "No live worker on task queue 'q1' registers workflow 'Order'" in await reason(store)
    await register(store)
    assert await reason(store) == ""


async def test_leased_workflow_task_names_the_worker_and_the_expiry(store: Store) -> None:
    await register(store)
    await start(store)
    await claim(store, "w1", lease_ms=60_000)
    assert re.fullmatch(
        rf"Its workflow task \(attempt 1\) is leased by worker 'w1' until {AT}: no other "
        "worker takes it before then.",
        await reason(store),
    )


async def test_failing_workflow_task_names_the_error_and_the_attempt(store: Store) -> None:
    await register(store)
    await start(store)
    task = await claim(store)
    await store.fail_workflow_task(
        NS, task.lease, failure("no such branch\nTraceback...", "NondeterminismError")
    )
    assert re.fullmatch(
        rf"Its workflow task is failing: attempt 1 failed with NondeterminismError: no such "
        rf"branch\.\.\.; attempt 2 is due at {AT}\.",
        await reason(store),
    )


async def test_activity_states(store: Store) -> None:
    await register(store)
    await start(store)
    task = await claim(store)
    slow_retry = activity_options(initial_ms=60_000)
    await store.complete_workflow_task(
        NS, task.lease, task.history_length, [schedule(1, "charge", slow_retry)]
    )
    # Queued, and no live worker registers "charge".
    assert await reason(store) == (
        "Waiting for activity 'charge' (seq 1): it is queued on task queue 'q1', but no live "
        "worker there registers that activity: start a worker that does."
    )
    await register(store, "aw", ("charge",))
    assert await reason(store) == ""  # a live worker serves it: progress
    attempt = await store.claim_activity_task(NS, QUEUE, "aw", ["charge"])
    assert attempt is not None
    assert re.fullmatch(
        rf"Waiting for activity 'charge' \(seq 1\): attempt 1 is leased by worker 'aw' "
        rf"until {AT}\.",
        await reason(store),
    )
    await store.fail_activity_task(NS, attempt.lease, failure("card declined", "PaymentError"))
    assert re.fullmatch(
        rf"Waiting for activity 'charge' \(seq 1\): in backoff until {AT} after 1 attempt "
        r"\(last error: PaymentError: card declined\)\.",
        await reason(store),
    )


async def test_timer_then_signal_or_condition_then_closed(store: Store) -> None:
    await register(store)
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(
        NS, task.lease, task.history_length, [timer(1, 3_600_000), timer(2, 7_200_000)]
    )
    assert re.fullmatch(
        rf"Waiting on a timer until {AT} \(the earliest of 2 timers\)\.", await reason(store)
    )
    await start(store, "wf-2")
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, task.history_length, [])
    assert (await reason(store, "wf-2")).startswith("Waiting for a signal or a condition: ")
    await store.signal_workflow(NS, "wf-2", None, "go", b"", "sig-1")
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, task.history_length, [complete(1)])
    assert await reason(store, "wf-2") == ""


async def test_a_pinned_run_needs_a_live_worker_of_its_build(store: Store) -> None:
    await store.register_worker(NS, "old", QUEUE, [("Order", "1", "fp-1")], [], "b-1", False)
    await start(store)
    task = await claim(store, "old")
    await store.complete_workflow_task(NS, task.lease, task.history_length, [])  # pins b-1
    await store.deregister_worker(NS, "old")
    await store.register_worker(NS, "new", QUEUE, [("Order", "1", "fp-1")], [], "b-2", False)
    await store.signal_workflow(NS, "wf-1", None, "go", b"", "sig-1")  # a workflow task
    described = await store.describe(NS, "wf-1", None)
    # The claim would never hand it to "new" (SERVED_BY_WORKER): nothing runs it.
    assert await store.claim_workflow_task(NS, QUEUE, "new", 30_000) is None
    assert not described.definition_available
    assert described.stuck_reason == (
        "No live worker of build 'b-1' on task queue 'q1' registers workflow 'Order' "
        "version '1', so its workflow tasks are not claimed: start a worker of build 'b-1' "
        "that registers this definition."
    )
    assert described.stuck_reason == described.definition_unavailable_reason
    await store.register_worker(NS, "old", QUEUE, [("Order", "1", "fp-1")], [], "b-1", False)
    assert (await store.describe(NS, "wf-1", None)).stuck_reason == ""
