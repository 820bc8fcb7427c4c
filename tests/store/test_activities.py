"""Activity tasks: claim, heartbeat, complete, retry, expiry, ambiguity, deadlines."""

from __future__ import annotations

import pytest

from durable_rpc.errors import LeaseLostError, WorkflowNotRunningError
from durable_rpc.store import ClaimedActivityTask, Store
from durable_rpc.v1 import history_pb2, options_pb2, payload_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    activity_options,
    claim,
    events,
    eventually,
    failure,
    history,
    kinds,
    payload,
    schedule,
    start,
    wait_db_time,
)


async def scheduled(
    store: Store, options: options_pb2.ActivityOptions | None = None, activity_type: str = "act"
) -> None:
    """Starts wf-1 and schedules activity seq 1; no workflow task remains."""
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1, activity_type, options)])


async def claim_activity(store: Store, worker: str = "aw1") -> ClaimedActivityTask:
    async def attempt() -> ClaimedActivityTask | None:
        return await store.claim_activity_task(NS, QUEUE, worker, [])

    return await eventually(attempt, what="an activity task")


def last_event(raw: list[bytes]) -> history_pb2.HistoryEvent:
    return events(raw)[-1]


async def test_claim_and_complete(store: Store) -> None:
    await scheduled(store, activity_options(start_to_close_ms=5_000, heartbeat_ms=1_000))
    assert await store.claim_activity_task(NS, QUEUE, "aw1", ["other"]) is None
    task = await store.claim_activity_task(NS, QUEUE, "aw1", ["other", "act"])
    assert task is not None
    assert (task.seq, task.activity_type, task.attempt, task.fencing_token) == (1, "act", 1, 1)
    assert payload_pb2.Payload.FromString(task.input).data == b"in"
    assert (task.heartbeat_timeout_ms, task.start_to_close_timeout_ms) == (1_000, 5_000)
    assert task.heartbeat_details is None
    assert task.workflow_id == "wf-1"
    # The lease is the heartbeat timeout.
    now = await store.now_ms()
    assert now < task.lease_expires_at_ms <= now + 1_000
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None

    await store.complete_activity_task(NS, task.lease, payload(b"charged"))
    done = last_event(await history(store))
    assert done.activity_completed.seq == 1
    assert done.activity_completed.result.data == b"charged"
    assert done.activity_completed.attempt == 1
    assert done.activity_completed.worker_id == "aw1"
    assert done.activity_completed.fencing_token == task.fencing_token
    # Idempotent duplicate; a different token is lease lost.
    length = len(await history(store))
    await store.complete_activity_task(NS, task.lease, payload(b"charged"))
    assert len(await history(store)) == length
    with pytest.raises(LeaseLostError):
        await store.fail_activity_task(NS, task.lease, failure())
    # The result wakes the workflow.
    wft = await claim(store)
    assert kinds(wft.events)[-1] == "activity_completed"
    assert (await store.describe(NS, "wf-1", None)).pending_activities == []


async def test_retry_with_backoff_then_final_failure(store: Store) -> None:
    await scheduled(store, activity_options(initial_ms=10, maximum_attempts=3))
    first = await claim_activity(store)
    # The answer is the retry's delay (the worker logs it), None once it fails for good.
    assert await store.fail_activity_task(NS, first.lease, failure("try 1")) == 10
    # A retry is not a history event and does not wake the workflow.
    assert kinds(await history(store))[-1] == "activity_scheduled"
    assert await store.claim_workflow_task(NS, QUEUE, "w", 1000) is None
    [pending] = (await store.describe(NS, "wf-1", None)).pending_activities
    assert pending.state == "waiting"
    assert pending.attempt == 2
    assert pending.last_failure is not None
    assert payload_pb2.Failure.FromString(pending.last_failure).message == "try 1"

    second = await claim_activity(store, "aw2")
    assert (second.attempt, second.fencing_token) == (2, first.fencing_token + 1)
    with pytest.raises(LeaseLostError):
        await store.complete_activity_task(NS, first.lease, payload(b"late"))
    assert await store.fail_activity_task(NS, second.lease, failure("try 2")) == 20
    third = await claim_activity(store, "aw3")
    assert third.attempt == 3
    assert await store.fail_activity_task(NS, third.lease, failure("try 3")) is None

    final = last_event(await history(store)).activity_failed
    assert (final.seq, final.attempt, final.worker_id) == (1, 3, "aw3")
    assert final.fencing_token == third.fencing_token
    assert final.failure.message == "try 3"
    assert not final.ambiguous
    assert await store.claim_activity_task(NS, QUEUE, "aw4", []) is None
    wft = await claim(store)
    assert kinds(wft.events)[-1] == "activity_failed"


async def test_retry_waits_for_its_backoff(store: Store) -> None:
    await scheduled(store, activity_options(initial_ms=300))
    task = await claim_activity(store)
    before = await store.now_ms()
    await store.fail_activity_task(NS, task.lease, failure())
    after = await store.now_ms()
    report = await store.process_due()
    assert report.next_due_ms is not None
    assert before + 300 <= report.next_due_ms <= after + 300
    if await store.now_ms() < report.next_due_ms:
        assert await store.claim_activity_task(NS, QUEUE, "aw", []) is None
    await wait_db_time(store, report.next_due_ms)
    retry = await store.claim_activity_task(NS, QUEUE, "aw", [])
    assert retry is not None and retry.attempt == 2


@pytest.mark.parametrize(
    ("options", "fail"),
    [
        pytest.param(activity_options(), failure("x", non_retryable=True), id="non-retryable"),
        pytest.param(
            activity_options(non_retryable=("PaymentDeclined",)),
            failure("x", "PaymentDeclined"),
            id="non-retryable-type",
        ),
        pytest.param(activity_options(maximum_attempts=1), failure("x"), id="max-attempts-1"),
        pytest.param(
            activity_options(initial_ms=5_000, schedule_to_close_ms=1_000, start_to_close_ms=500),
            failure("x"),
            id="schedule-to-close-would-pass",
        ),
    ],
)
async def test_final_failure_without_retry(
    store: Store, options: options_pb2.ActivityOptions, fail: bytes
) -> None:
    await scheduled(store, options)
    task = await claim_activity(store)
    await store.fail_activity_task(NS, task.lease, fail)
    final = last_event(await history(store)).activity_failed
    assert final.attempt == 1
    assert final.failure == payload_pb2.Failure.FromString(fail)
    assert await store.claim_activity_task(NS, QUEUE, "aw", []) is None


async def test_non_idempotent_expiry_is_ambiguous_and_never_reruns(store: Store) -> None:
    await scheduled(store, activity_options(start_to_close_ms=50, non_idempotent=True))
    task = await claim_activity(store, "aw1")
    before = await store.process_due()
    assert before.expired_activity_attempts == 0
    assert before.next_due_ms == task.lease_expires_at_ms
    await wait_db_time(store, task.lease_expires_at_ms)
    report = await store.process_due()
    assert report.expired_activity_attempts == 1
    failed = last_event(await history(store)).activity_failed
    assert failed.ambiguous
    assert failed.failure.type == "AmbiguousEffectError"
    for part in (f"task_id={task.task_id}", "attempt=1", "worker_id=aw1", "fencing_token=1"):
        assert part in failed.failure.message
    assert (failed.attempt, failed.worker_id, failed.fencing_token) == (1, "aw1", 1)
    # Never re-run, and the late outcome of the lost attempt is refused.
    assert await store.claim_activity_task(NS, QUEUE, "aw2", []) is None
    with pytest.raises(LeaseLostError):
        await store.complete_activity_task(NS, task.lease, payload(b"late"))
    assert (await store.process_due()).expired_activity_attempts == 0
    wft = await claim(store)
    assert kinds(wft.events)[-1] == "activity_failed"


async def test_idempotent_expiry_retries_with_a_higher_token(store: Store) -> None:
    await scheduled(
        store, activity_options(start_to_close_ms=50, initial_ms=10, maximum_attempts=2)
    )
    first = await claim_activity(store, "aw1")
    await wait_db_time(store, first.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    assert kinds(await history(store))[-1] == "activity_scheduled"
    second = await claim_activity(store, "aw2")
    assert (second.attempt, second.fencing_token) == (2, first.fencing_token + 1)
    with pytest.raises(LeaseLostError):
        await store.complete_activity_task(NS, first.lease, payload(b"late"))
    # The second attempt also times out: attempts exhausted -> final timeout failure.
    await wait_db_time(store, second.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    final = last_event(await history(store)).activity_failed
    assert final.failure.type == "ActivityTimeoutError"
    assert not final.ambiguous
    assert final.attempt == 2


async def test_heartbeat_extends_lease_and_keeps_details(store: Store) -> None:
    await scheduled(
        store, activity_options(start_to_close_ms=10_000, heartbeat_ms=200, initial_ms=10)
    )
    task = await claim_activity(store)
    beat = await store.heartbeat_activity_task(NS, task.lease, payload(b"progress-1"))
    assert not beat.cancel_requested
    assert beat.lease_expires_at_ms >= task.lease_expires_at_ms
    # A heartbeat without details keeps the last ones.
    beat2 = await store.heartbeat_activity_task(NS, task.lease, None)
    assert beat2.lease_expires_at_ms >= beat.lease_expires_at_ms
    await store.fail_activity_task(NS, task.lease, failure())
    retry = await claim_activity(store)
    assert retry.heartbeat_details is not None
    assert payload_pb2.Payload.FromString(retry.heartbeat_details).data == b"progress-1"
    with pytest.raises(LeaseLostError):
        await store.heartbeat_activity_task(NS, task.lease, None)


async def test_heartbeat_never_extends_past_start_to_close(store: Store) -> None:
    await scheduled(store, activity_options(start_to_close_ms=2_000, heartbeat_ms=10_000))
    task = await claim_activity(store)
    now = await store.now_ms()
    assert task.lease_expires_at_ms <= now + 2_000
    beat = await store.heartbeat_activity_task(NS, task.lease, None)
    assert beat.lease_expires_at_ms == task.lease_expires_at_ms


async def test_heartbeat_timeout_expires_attempt(store: Store) -> None:
    await scheduled(
        store, activity_options(start_to_close_ms=10_000, heartbeat_ms=50, initial_ms=10)
    )
    task = await claim_activity(store)
    await wait_db_time(store, task.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    retry = await claim_activity(store, "aw2")
    assert retry.attempt == 2
    # Taken over: the silent holder's heartbeat is too late now (see test_late_reports).
    with pytest.raises(LeaseLostError):
        await store.heartbeat_activity_task(NS, task.lease, None)


async def test_run_close_reaches_running_activities_and_a_cancel_request_leaves_them(
    store: Store,
) -> None:
    await scheduled(store)
    task = await claim_activity(store)
    # Cooperative cancellation: the workflow code cancels what it awaited by each call's
    # policy (RequestCancelActivity); code in workflow.shield() keeps its activities.
    await store.request_cancel(NS, "wf-1", None, "stop")
    beat = await store.heartbeat_activity_task(NS, task.lease, None)
    assert not beat.cancel_requested
    await store.terminate(NS, "wf-1", None, "gone")
    beat = await store.heartbeat_activity_task(NS, task.lease, None)
    assert beat.cancel_requested
    with pytest.raises(WorkflowNotRunningError):
        await store.complete_activity_task(NS, task.lease, payload(b"late"))
    assert kinds(await history(store))[-1] == "workflow_terminated"


async def test_schedule_to_close_deadline_of_a_queued_activity(store: Store) -> None:
    await scheduled(store, activity_options(start_to_close_ms=None, schedule_to_close_ms=50))
    report = await store.process_due()
    assert report.next_due_ms is not None
    await wait_db_time(store, report.next_due_ms)
    await store.process_due()
    failed = last_event(await history(store)).activity_failed
    assert failed.failure.type == "ActivityTimeoutError"
    assert failed.attempt == 0  # never started
    assert await store.claim_activity_task(NS, QUEUE, "aw", []) is None
    assert kinds((await claim(store)).events)[-1] == "activity_failed"


async def test_lease_defaults_to_schedule_to_close_then_default(store: Store) -> None:
    await scheduled(store, activity_options(start_to_close_ms=None, schedule_to_close_ms=4_000))
    task = await claim_activity(store)
    now = await store.now_ms()
    assert now + 3_000 < task.lease_expires_at_ms <= now + 4_000
