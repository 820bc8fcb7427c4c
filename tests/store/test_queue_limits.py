"""Task-queue activity limits (``store/_queue_limits``): a claim over the queue's limit of
leased attempts leaves the task queued, whichever way it claims (a poll, an eager claim,
an inline decision's eager claim on PostgreSQL's hot path) and however many stores claim
at once on one database; an attempt's outcome wakes the queue's polls."""

from __future__ import annotations

import asyncio

import pytest

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store import (
    ClaimedActivityTask,
    EagerActivities,
    InlineWorkflowTask,
    Store,
    TaskQueueLimit,
)
from tests.store.conftest import Backend
from tests.store.helpers import (
    NS,
    QUEUE,
    RecordingListener,
    claim,
    failure,
    payload,
    schedule,
    start,
)


async def _scheduled(store: Store, count: int, workflow_id: str = "wf-1") -> None:
    """Starts ``workflow_id`` and schedules ``count`` activities on QUEUE (not eager)."""
    await start(store, workflow_id)
    task = await claim(store)
    commands = [schedule(seq, "act") for seq in range(1, count + 1)]
    await store.complete_workflow_task(NS, task.lease, 1, commands)


async def _leased(store: Store) -> int:
    return (await store.describe_task_queue(NS, QUEUE)).activities_in_use


async def test_limit_is_set_listed_and_removed(store: Store) -> None:
    limit = await store.set_task_queue_limit(NS, QUEUE, 3)
    assert limit is not None
    assert (limit.task_queue, limit.max_concurrent_activities) == (QUEUE, 3)
    assert await store.list_task_queue_limits(NS) == [limit]
    raised = await store.set_task_queue_limit(NS, QUEUE, 5)
    assert isinstance(raised, TaskQueueLimit) and raised.max_concurrent_activities == 5
    assert (await store.describe_task_queue(NS, QUEUE)).max_concurrent_activities == 5
    assert await store.set_task_queue_limit(NS, QUEUE, None) is None
    assert await store.list_task_queue_limits(NS) == []
    assert (await store.describe_task_queue(NS, QUEUE)).max_concurrent_activities is None
    for bad in (0, -1, 1_000_001):
        with pytest.raises(InvalidArgumentError, match="max_concurrent_activities"):
            await store.set_task_queue_limit(NS, QUEUE, bad)
    with pytest.raises(InvalidArgumentError, match="task_queue"):
        await store.set_task_queue_limit(NS, "", 1)


async def test_claim_over_the_limit_is_deferred_until_an_attempt_ends(
    store: Store, listener: RecordingListener
) -> None:
    await store.set_task_queue_limit(NS, QUEUE, 2)
    await _scheduled(store, 4)
    first = await store.claim_activity_task(NS, QUEUE, "aw1", [])
    second = await store.claim_activity_task(NS, QUEUE, "aw2", [])
    assert first is not None and second is not None
    deferred_before = store.stats.deferred_claims
    assert await store.claim_activity_task(NS, QUEUE, "aw3", []) is None
    assert store.stats.deferred_claims == deferred_before + 1
    described = await store.describe_task_queue(NS, QUEUE)
    assert (described.max_concurrent_activities, described.activities_in_use) == (2, 2)
    activity_backlog = [b for b in described.backlog if b.kind == "activity"]
    assert activity_backlog and activity_backlog[0].queued == 2  # deferred, not failed

    # A completion frees a slot and wakes the queue's activity polls.
    listener.tasks.clear()
    await store.complete_activity_task(NS, first.lease, payload(b"r"))
    assert (NS, QUEUE, "activity") in listener.tasks
    third = await store.claim_activity_task(NS, QUEUE, "aw3", [])
    assert third is not None and third.seq not in (first.seq, second.seq)
    assert await store.claim_activity_task(NS, QUEUE, "aw4", []) is None  # deferred again

    # So does a failure (here: retried later, the slot is free meanwhile).
    listener.tasks.clear()
    await store.fail_activity_task(NS, second.lease, failure())
    assert (NS, QUEUE, "activity") in listener.tasks
    assert await _leased(store) == 1


async def test_an_outcome_wakes_the_polls_only_after_a_deferred_claim(
    store: Store, listener: RecordingListener
) -> None:
    await store.set_task_queue_limit(NS, QUEUE, 5)
    await _scheduled(store, 2)
    first = await store.claim_activity_task(NS, QUEUE, "aw1", [])
    assert first is not None
    listener.tasks.clear()
    await store.complete_activity_task(NS, first.lease, payload(b"r"))
    # No claim was deferred: no poll waits for the slot, none is woken.
    assert (NS, QUEUE, "activity") not in listener.tasks


async def test_unlimited_queue_and_other_queues_are_untouched(store: Store) -> None:
    await store.set_task_queue_limit(NS, "elsewhere", 1)
    await _scheduled(store, 3)
    claimed = [await store.claim_activity_task(NS, QUEUE, f"aw{i}", []) for i in range(3)]
    assert all(task is not None for task in claimed)
    assert store.stats.deferred_claims == 0


async def test_eager_claims_take_only_free_slots(store: Store) -> None:
    await store.set_task_queue_limit(NS, QUEUE, 1)
    run_id = await start(store)
    task = await claim(store)
    eager = EagerActivities(QUEUE, frozenset({"act"}), 3)
    first = await store.complete_workflow_task_tracked(
        NS, task.lease, 1, [schedule(1, "act"), schedule(2, "act")], eager=eager
    )
    assert [t.seq for t in first.eager_activities] == [1]
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None
    # An activity completion's inline decision (PostgreSQL: the hot path's function hands
    # a limited namespace to the general path) claims eagerly within the limit too.
    [one] = first.eager_activities
    inline = InlineWorkflowTask(run_id, first.history_length, [schedule(3, "act")], eager=eager)
    done = await store.complete_activity_task_inline(NS, one.lease, payload(b"r"), inline=inline)
    assert done.inline is not None
    assert [t.seq for t in done.inline.eager_activities] == [3]  # the slot seq 1 freed
    assert await _leased(store) == 1
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None  # seq 2 waits


async def test_concurrent_claims_from_two_stores_never_pass_the_limit(
    durable_backend: Backend,
) -> None:
    """Two stores on one database (two server replicas) claiming at once, round after
    round, each round's leases completed before the next: never more than the limit
    leased (PostgreSQL: the claims serialize on the limit row's lock; without it both
    count the same free slot)."""
    first, second = durable_backend.make(), durable_backend.make()
    await first.open()
    await second.open()
    try:
        await first.set_task_queue_limit(NS, QUEUE, 1)
        rounds = 30
        await _scheduled(first, rounds * 2)

        async def claims(store: Store, worker: str) -> list[ClaimedActivityTask]:
            got = await asyncio.gather(
                *(store.claim_activity_task(NS, QUEUE, f"{worker}-{i}", []) for i in range(3))
            )
            return [task for task in got if task is not None]

        for _ in range(rounds):
            a, b = await asyncio.gather(claims(first, "a"), claims(second, "b"))
            assert len(a) + len(b) == 1
            for task in (*a, *b):
                await first.complete_activity_task(NS, task.lease, payload(b"r"))
    finally:
        await first.close()
        await second.close()
