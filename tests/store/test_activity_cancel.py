"""RequestCancelActivity: queued attempts are cancelled at once, leased ones through
cancel_requested (then a reported CancelledError or an expired lease), and an outcome
that arrives anyway is kept."""

from __future__ import annotations

from durable_rpc.store import ClaimedActivityTask, Store
from durable_rpc.v1 import workflow_task_pb2
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


def cancel_activity(seq: int) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        request_cancel_activity=workflow_task_pb2.RequestCancelActivity(activity_seq=seq),
    )


async def leased(store: Store, lease_ms: int | None = None) -> tuple[ClaimedActivityTask, int]:
    """wf-1 with activity 1 leased, then a second workflow task (a signal) that asks to
    cancel it; returns the activity's lease and the history length before the cancel."""
    await start(store)
    task = await claim(store)
    options = activity_options(start_to_close_ms=lease_ms) if lease_ms else None
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1, "act", options)])

    async def attempt() -> ClaimedActivityTask | None:
        return await store.claim_activity_task(NS, QUEUE, "aw1", [])

    activity = await eventually(attempt, what="an activity task")
    await store.signal_workflow(NS, "wf-1", None, "go", payload(b""), "sig-1")
    second = await claim(store)
    seen = len(await history(store))
    await store.complete_workflow_task(NS, second.lease, seen, [cancel_activity(1)])
    return activity, seen


async def test_a_queued_activity_is_cancelled_at_once(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1), cancel_activity(1)])
    assert kinds(await history(store))[-4:] == [
        "workflow_task_completed",
        "activity_scheduled",
        "activity_cancel_requested",
        "activity_cancelled",
    ]
    cancelled = events(await history(store))[-1].activity_cancelled
    assert (cancelled.seq, cancelled.attempt) == (1, 0)
    assert await store.claim_activity_task(NS, QUEUE, "aw", []) is None
    # The cancellation is input: the workflow gets a task to see it.
    assert kinds((await claim(store)).events)[-1] == "activity_cancelled"


async def test_a_leased_activity_is_asked_and_its_reported_cancellation_recorded(
    store: Store,
) -> None:
    activity, _ = await leased(store)
    assert kinds(await history(store))[-1] == "activity_cancel_requested"
    beat = await store.heartbeat_activity_task(NS, activity.lease, None)
    assert beat.cancel_requested
    await store.fail_activity_task(
        NS,
        activity.lease,
        failure("the activity was cancelled", "CancelledError", non_retryable=True),
    )
    last = events(await history(store))[-1]
    assert (last.activity_cancelled.seq, last.activity_cancelled.attempt) == (1, 1)


async def test_a_leased_activity_that_completes_anyway_keeps_its_result(store: Store) -> None:
    activity, _ = await leased(store)
    await store.complete_activity_task(NS, activity.lease, payload(b"written"))
    recorded = kinds(await history(store))
    assert recorded[-1] == "activity_completed"
    assert "activity_cancelled" not in recorded


async def test_an_expired_lease_after_a_cancel_request_is_a_cancellation(store: Store) -> None:
    activity, _ = await leased(store, lease_ms=300)
    await wait_db_time(store, activity.lease_expires_at_ms + 1)
    await store.process_due()
    recorded = kinds(await history(store))
    assert recorded[-1] == "activity_cancelled"
    assert "activity_failed" not in recorded


async def test_a_cancel_request_after_the_outcome_is_moot(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1)])

    async def attempt() -> ClaimedActivityTask | None:
        return await store.claim_activity_task(NS, QUEUE, "aw1", [])

    activity = await eventually(attempt, what="an activity task")
    await store.complete_activity_task(NS, activity.lease, payload(b"done"))
    second = await claim(store)
    seen = len(await history(store))
    await store.complete_workflow_task(NS, second.lease, seen, [cancel_activity(1)])
    assert kinds(await history(store))[-2:] == [
        "workflow_task_completed",
        "activity_cancel_requested",
    ]
