"""Rate limits (``store/_rate_limits``): a claim takes a token from the bucket of its
task's rate_limit_key (or, without a key, of its activity type) in the claim's own
transaction, on the database clock; with no token the task stays queued, other tasks are
claimed past it, and the poll learns when the next token is due. Two stores claiming at
once on one database never both take the last token."""

from __future__ import annotations

import asyncio

import pytest

from durable_rpc.errors import InvalidRateLimitError, NotFoundError
from durable_rpc.store import ClaimedActivityTask, EagerActivities, InlineWorkflowTask, Store
from tests.store.conftest import Backend
from tests.store.helpers import (
    NS,
    QUEUE,
    RecordingListener,
    activity_options,
    claim,
    payload,
    schedule,
    start,
)

HOUR_MS = 3_600_000


def keyed(seq: int, key: str, activity_type: str = "act") -> object:
    options = activity_options()
    options.rate_limit_key = key
    return schedule(seq, activity_type, options)


async def _decided(store: Store, commands: list[object], workflow_id: str = "wf-1") -> None:
    """Starts ``workflow_id`` and schedules ``commands`` on QUEUE (not eager)."""
    await start(store, workflow_id)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, commands)  # type: ignore[arg-type]


async def test_rate_limit_is_set_listed_and_removed(store: Store) -> None:
    limit = await store.set_rate_limit(NS, "key", "openai", 60, 60_000)
    assert (limit.scope, limit.name, limit.permits, limit.period_ms, limit.burst) == (
        "key",
        "openai",
        60,
        60_000,
        60,  # burst: a full period's worth by default
    )
    by_type = await store.set_rate_limit(NS, "activity_type", "act", 5, 1_000, burst=1)
    assert await store.list_rate_limits(NS) == [by_type, limit]  # by scope, then name
    assert (await store.describe_task_queue(NS, QUEUE)).rate_limits == (by_type, limit)
    changed = await store.set_rate_limit(NS, "key", "openai", 10, 1_000)
    assert (changed.permits, changed.period_ms, changed.burst) == (10, 1_000, 10)
    await store.remove_rate_limit(NS, "key", "openai")
    assert await store.list_rate_limits(NS) == [by_type]
    with pytest.raises(NotFoundError):
        await store.remove_rate_limit(NS, "key", "openai")


@pytest.mark.parametrize(
    ("permits", "period_ms", "burst", "match"),
    [
        (0, 1_000, None, "permits"),
        (-5, 1_000, None, "permits"),
        (1_000_001, HOUR_MS, None, "permits"),
        (5, 0, None, "period"),
        (5, -1_000, None, "period"),
        (5, 86_400_001, None, "period"),
        (200_000, 1_000, None, "claims a second"),
        (5, 1_000, 0, "burst"),
        (5, 1_000, -1, "burst"),
    ],
)
async def test_bad_limits_are_refused_with_a_stable_reason(
    store: Store, permits: int, period_ms: int, burst: int | None, match: str
) -> None:
    with pytest.raises(InvalidRateLimitError, match=match) as refused:
        await store.set_rate_limit(NS, "key", "openai", permits, period_ms, burst)
    assert refused.value.reason == "INVALID_RATE_LIMIT"
    assert await store.list_rate_limits(NS) == []


async def test_bad_scope_is_refused(store: Store) -> None:
    with pytest.raises(InvalidRateLimitError, match="scope"):
        await store.set_rate_limit(NS, "queue", "openai", 5, 1_000)


async def test_token_taken_refused_when_empty_and_refilled_on_database_time(
    store: Store,
) -> None:
    await store.set_rate_limit(NS, "key", "openai", 2, 1_000)  # interval 500 ms, burst 2
    await _decided(store, [keyed(seq, "openai") for seq in (1, 2, 3)])
    first = await store.poll_activity_task(NS, QUEUE, "aw1", [])
    second = await store.poll_activity_task(NS, QUEUE, "aw2", [])
    assert first.task is not None and second.task is not None  # the burst
    deferred_before = store.stats.rate_deferred_claims
    empty = await store.poll_activity_task(NS, QUEUE, "aw3", [])
    assert empty.task is None
    assert store.stats.rate_deferred_claims == deferred_before + 1
    # The next token is due one interval after the first take (the database's clock).
    assert empty.retry_in_ms is not None and 0 < empty.retry_in_ms <= 500
    described = await store.describe_task_queue(NS, QUEUE)
    [activity_backlog] = [b for b in described.backlog if b.kind == "activity"]
    assert activity_backlog.queued == 1  # deferred, not failed
    assert not await store.has_claimable_task(NS, QUEUE, "activity")
    [bucket] = described.rate_limits
    assert bucket.next_token_ms > described.now_ms

    # Waiting is the test: the bucket refills with the database clock alone.
    await asyncio.sleep(empty.retry_in_ms / 1000 + 0.02)
    assert await store.has_claimable_task(NS, QUEUE, "activity")
    third = await store.poll_activity_task(NS, QUEUE, "aw3", [])
    assert third.task is not None and third.task.seq == 3
    # The bucket is empty again, and nothing else is held back: no deferral counted.
    assert (await store.poll_activity_task(NS, QUEUE, "aw4", [])).task is None
    assert store.stats.rate_deferred_claims == deferred_before + 1


async def test_a_changed_or_removed_limit_wakes_the_polls_it_held_back(
    store: Store, listener: RecordingListener
) -> None:
    """A poll held back by a slow limit waits for its next token (an hour here): setting
    or removing the limit must wake it, or the held-back task waits that long."""
    await store.set_rate_limit(NS, "activity_type", "act", 1, HOUR_MS, burst=1)
    await _decided(store, [schedule(1, "act"), schedule(2, "act")])
    assert (await store.poll_activity_task(NS, QUEUE, "aw1", [])).task is not None
    assert (await store.poll_activity_task(NS, QUEUE, "aw2", [])).task is None
    listener.tasks.clear()
    await store.set_rate_limit(NS, "activity_type", "act", 10, 1_000)
    assert (NS, QUEUE, "activity") in listener.tasks
    listener.tasks.clear()
    await store.remove_rate_limit(NS, "activity_type", "act")
    assert (NS, QUEUE, "activity") in listener.tasks


async def test_a_type_limit_holds_keyless_tasks_only_and_others_pass_it(store: Store) -> None:
    await store.set_rate_limit(NS, "activity_type", "act", 1, HOUR_MS, burst=1)
    await _decided(
        store,
        [
            schedule(1, "act"),
            schedule(2, "act"),  # held back: the head of the queue, claimed past
            keyed(3, "elsewhere"),  # a key of its own: not the type's limit
            schedule(4, "other"),
        ],
    )
    got = [await store.poll_activity_task(NS, QUEUE, f"aw{i}", []) for i in range(4)]
    assert [p.task.seq for p in got[:3] if p.task is not None] == [1, 3, 4]
    assert got[3].task is None
    assert got[3].retry_in_ms is not None and HOUR_MS - 10_000 < got[3].retry_in_ms <= HOUR_MS
    # Removing the limit lets the held-back task go at once.
    await store.remove_rate_limit(NS, "activity_type", "act")
    again = await store.claim_activity_task(NS, QUEUE, "aw5", [])
    assert again is not None and again.seq == 2


async def test_a_key_is_shared_by_activity_types_and_task_queues(store: Store) -> None:
    await store.set_rate_limit(NS, "key", "openai", 1, HOUR_MS, burst=1)
    await _decided(store, [keyed(1, "openai", "summarize"), keyed(2, "openai", "classify")])
    await _decided(store, [keyed(1, "openai", "act")], workflow_id="wf-2")
    claimed = [await store.claim_activity_task(NS, QUEUE, f"aw{i}", []) for i in range(3)]
    assert [t is not None for t in claimed] == [True, False, False]


async def test_eager_claims_take_tokens(store: Store) -> None:
    await store.set_rate_limit(NS, "key", "openai", 1, HOUR_MS, burst=1)
    await store.set_rate_limit(NS, "activity_type", "act", 1, HOUR_MS, burst=1)
    run_id = await start(store)
    task = await claim(store)
    eager = EagerActivities(QUEUE, frozenset({"act"}), 5)
    first = await store.complete_workflow_task_tracked(
        NS,
        task.lease,
        1,
        [keyed(1, "openai"), keyed(2, "openai"), schedule(3, "act")],  # type: ignore[list-item]
        eager=eager,
    )
    assert [t.seq for t in first.eager_activities] == [1, 3]
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None  # seq 2 waits
    # An activity completion's inline decision (PostgreSQL: the hot path's function hands
    # a namespace with rate limits to the general path) takes tokens too.
    one = first.eager_activities[0]
    inline = InlineWorkflowTask(
        run_id, first.history_length, [schedule(4, "act"), schedule(5, "free")], eager=eager
    )
    done = await store.complete_activity_task_inline(NS, one.lease, payload(b"r"), inline=inline)
    assert done.inline is not None
    assert [t.seq for t in done.inline.eager_activities] == []  # "free" is not eager-able
    free = await store.claim_activity_task(NS, QUEUE, "aw3", [])
    assert free is not None and free.activity_type == "free"
    assert await store.claim_activity_task(NS, QUEUE, "aw3", []) is None


async def test_a_key_scheduled_by_an_inline_decision_is_kept(store: Store) -> None:
    """PostgreSQL's hot-path function cannot record a key: such a decision takes the
    general path, so the task still takes its key's token."""
    run_id = await start(store)
    task = await claim(store)
    first = await store.complete_workflow_task_tracked(NS, task.lease, 1, [schedule(1, "act")])
    attempt = await store.claim_activity_task(NS, QUEUE, "aw1", [])
    assert attempt is not None
    await store.set_rate_limit(NS, "key", "openai", 1, HOUR_MS, burst=1)
    # Eager asked for (so the decision has the hot path's shape), of no type scheduled.
    eager = EagerActivities(QUEUE, frozenset({"other"}), 5)
    commands = [keyed(2, "openai"), keyed(3, "openai")]
    inline = InlineWorkflowTask(run_id, first.history_length, commands, eager=eager)  # type: ignore[arg-type]
    done = await store.complete_activity_task_inline(
        NS, attempt.lease, payload(b"r"), inline=inline
    )
    assert done.inline is not None
    taken = await store.claim_activity_task(NS, QUEUE, "aw2", [])
    assert taken is not None and taken.seq == 2
    assert await store.claim_activity_task(NS, QUEUE, "aw3", []) is None


async def test_concurrent_claims_from_two_stores_never_take_the_last_token_twice(
    durable_backend: Backend,
) -> None:
    """Two stores on one database (two server replicas) claiming at once from a bucket
    of one token, round after round (a set limit starts full): exactly one claim takes it
    (PostgreSQL: the claims serialize on the bucket row's lock; without it both read the
    same token)."""
    first, second = durable_backend.make(), durable_backend.make()
    await first.open()
    await second.open()
    try:
        rounds = 20
        await _decided(first, [keyed(seq, "openai") for seq in range(1, rounds * 2 + 1)])

        async def claims(store: Store, worker: str) -> list[ClaimedActivityTask]:
            got = await asyncio.gather(
                *(store.claim_activity_task(NS, QUEUE, f"{worker}-{i}", []) for i in range(3))
            )
            return [task for task in got if task is not None]

        for _ in range(rounds):
            await first.set_rate_limit(NS, "key", "openai", 1, HOUR_MS, burst=1)
            a, b = await asyncio.gather(claims(first, "a"), claims(second, "b"))
            assert len(a) + len(b) == 1
    finally:
        await first.close()
        await second.close()
