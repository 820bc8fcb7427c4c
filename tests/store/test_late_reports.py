"""A holder's report after its lease expired: accepted while its token is the task's latest
and no outcome ended the attempt; LEASE_LOST after a takeover or a recorded expiry outcome
(the lease protocol in store/README.md)."""

from __future__ import annotations

import pytest

from durable_rpc.errors import LeaseLostError
from durable_rpc.store import Store
from durable_rpc.v1 import options_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    activity_options,
    claim,
    complete,
    events,
    failure,
    history,
    kinds,
    payload,
    start,
    wait_db_time,
)
from tests.store.test_activities import claim_activity, scheduled


def short_lease(**overrides: object) -> options_pb2.ActivityOptions:
    """A 50 ms lease (the heartbeat timeout) inside a long start_to_close."""
    options: dict[str, object] = {"start_to_close_ms": 30_000, "heartbeat_ms": 50}
    options.update(overrides)
    return activity_options(**options)  # type: ignore[arg-type]


async def test_late_completion_before_the_expiry_pass_is_accepted(store: Store) -> None:
    await scheduled(store, short_lease())
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms + 1)
    await store.complete_activity_task(NS, task.lease, payload(b"late"))
    completed = events(await history(store))[-1].activity_completed
    assert (completed.attempt, completed.worker_id, completed.fencing_token) == (1, "aw1", 1)
    # Nothing is left to expire or to run again.
    assert (await store.process_due()).expired_activity_attempts == 0
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None


async def test_late_completion_after_the_expiry_pass_scheduled_a_retry_wins(
    store: Store,
) -> None:
    await scheduled(store, short_lease(initial_ms=10))
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    assert kinds(await history(store))[-1] == "activity_scheduled"
    # The retry is due (10 ms backoff) but nobody claimed it: the token is still the latest.
    await wait_db_time(store, (await store.now_ms()) + 20)
    await store.process_due()
    await store.complete_activity_task(NS, task.lease, payload(b"late"))
    completed = events(await history(store))[-1].activity_completed
    # The attempt that ran is the one recorded, not the retry that never started.
    assert (completed.attempt, completed.fencing_token) == (1, task.fencing_token)
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None
    # A repeat of the same report is still the idempotent success.
    await store.complete_activity_task(NS, task.lease, payload(b"late"))
    assert kinds(await history(store)).count("activity_completed") == 1


async def test_late_failure_after_the_expiry_pass_counts_one_attempt(store: Store) -> None:
    await scheduled(store, short_lease(initial_ms=10, maximum_attempts=3))
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    await store.fail_activity_task(NS, task.lease, failure("Boom"))
    retry = await claim_activity(store, "aw2")
    # The expiry's retry was replaced by the failure's: attempt 2, not 3.
    assert (retry.attempt, retry.fencing_token) == (2, task.fencing_token + 1)


async def test_late_heartbeat_revives_the_lease(store: Store) -> None:
    await scheduled(store, short_lease(initial_ms=10))
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    beat = await store.heartbeat_activity_task(NS, task.lease, payload(b"progress"))
    now = await store.now_ms()
    assert now < beat.lease_expires_at_ms <= now + 50
    # Leased again: nobody can claim it while the holder heartbeats.
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None
    description = await store.describe(NS, "wf-1", None)
    [pending] = description.pending_activities
    assert (pending.state, pending.attempt, pending.worker_id) == ("leased", 1, "aw1")
    await store.complete_activity_task(NS, task.lease, payload(b"done"))
    assert events(await history(store))[-1].activity_completed.attempt == 1


async def test_late_heartbeat_past_start_to_close_is_lease_lost(store: Store) -> None:
    await scheduled(store, activity_options(start_to_close_ms=50, initial_ms=10))
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms + 1)
    with pytest.raises(LeaseLostError):
        await store.heartbeat_activity_task(NS, task.lease, None)
    # The refused heartbeat changed nothing: the expiry pass still times the attempt out.
    assert (await store.process_due()).expired_activity_attempts == 1
    retry = await claim_activity(store, "aw2")
    assert retry.attempt == 2


async def test_late_report_after_a_takeover_is_lease_lost(store: Store) -> None:
    await scheduled(store, short_lease(initial_ms=10))
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    taken = await claim_activity(store, "aw2")
    assert taken.fencing_token == task.fencing_token + 1
    before = await history(store)
    for report in (
        store.complete_activity_task(NS, task.lease, payload(b"late")),
        store.fail_activity_task(NS, task.lease, failure()),
        store.heartbeat_activity_task(NS, task.lease, None),
    ):
        with pytest.raises(LeaseLostError):
            await report
    assert await history(store) == before
    await store.complete_activity_task(NS, taken.lease, payload(b"new"))
    assert events(await history(store))[-1].activity_completed.fencing_token == 2


async def test_late_report_after_an_ambiguous_expiry_is_lease_lost(store: Store) -> None:
    await scheduled(store, short_lease(non_idempotent=True))
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    before = await history(store)
    assert events(before)[-1].activity_failed.ambiguous
    # The attempt failed closed: its late outcome cannot overturn the recorded one.
    for report in (
        store.complete_activity_task(NS, task.lease, payload(b"late")),
        store.heartbeat_activity_task(NS, task.lease, None),
    ):
        with pytest.raises(LeaseLostError):
            await report
    assert await history(store) == before


async def test_late_report_after_the_final_timeout_is_lease_lost(store: Store) -> None:
    await scheduled(store, short_lease(maximum_attempts=1))
    task = await claim_activity(store, "aw1")
    await wait_db_time(store, task.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    before = await history(store)
    assert events(before)[-1].activity_failed.failure.type == "ActivityTimeoutError"
    with pytest.raises(LeaseLostError):
        await store.complete_activity_task(NS, task.lease, payload(b"late"))
    assert await history(store) == before


async def test_late_workflow_task_completion_wins_until_a_new_claim(store: Store) -> None:
    await start(store)
    task = await claim(store, "w1", lease_ms=50)
    await wait_db_time(store, task.lease_expires_at_ms)
    await store.process_due()  # back in the queue as attempt 2, same token
    assert (await store.describe(NS, "wf-1", None)).workflow_task_attempt == 2
    await store.complete_workflow_task(NS, task.lease, 1, [complete(1, b"late")])
    assert kinds(await history(store))[-1] == "workflow_completed"
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 30_000) is None


async def test_late_workflow_task_completion_after_a_new_claim_is_lease_lost(
    store: Store,
) -> None:
    await start(store)
    task = await claim(store, "w1", lease_ms=50)
    await wait_db_time(store, task.lease_expires_at_ms)
    await store.process_due()
    taken = await claim(store, "w2")
    assert (taken.fencing_token, taken.attempt) == (task.fencing_token + 1, 2)
    with pytest.raises(LeaseLostError):
        await store.complete_workflow_task(NS, task.lease, 1, [complete(1, b"late")])
    assert kinds(await history(store)) == ["workflow_started"]
