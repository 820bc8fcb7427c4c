"""Inline workflow tasks: a decision recorded with the activity completion that causes it,
only when that result is the task's only new input; otherwise the completion alone."""

from __future__ import annotations

import pytest

from durable_rpc.errors import LeaseLostError
from durable_rpc.store import (
    ClaimedActivityTask,
    DirectClaim,
    EagerActivities,
    InlineWorkflowTask,
    LeaseRef,
    StartResult,
    Store,
)
from durable_rpc.v1 import history_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    claim,
    complete,
    events,
    history,
    kinds,
    payload,
    schedule,
    start,
)


async def first_activity(store: Store) -> tuple[str, ClaimedActivityTask, int]:
    """Starts wf-1; its first task schedules activity seq 1, claimed eagerly by w1.
    Returns (run id, the attempt, history length after the decision)."""
    run_id = await start(store)
    task = await claim(store)
    done = await store.complete_workflow_task_tracked(
        NS,
        task.lease,
        1,
        [schedule(1, "act")],
        eager=EagerActivities(QUEUE, frozenset({"act"}), 1),
    )
    [activity] = done.eager_activities
    assert activity.seq == 1
    return run_id, activity, done.history_length


async def test_decision_recorded_with_the_completion(store: Store) -> None:
    run_id, activity, length = await first_activity(store)
    assert length == len(await history(store)) == 3
    inline = InlineWorkflowTask(
        run_id=run_id,
        last_seen_event_id=length,
        commands=[schedule(2, "act")],
        build_id="b1",
        eager=EagerActivities(QUEUE, frozenset({"act"}), 1),
    )
    done = await store.complete_activity_task_inline(
        NS, activity.lease, payload(b"r1"), inline=inline
    )
    assert done.workflow_task is None
    assert done.inline is not None
    raw = await history(store)
    assert kinds(raw) == [
        "workflow_started",
        "workflow_task_completed",
        "activity_scheduled",
        "activity_completed",
        "workflow_task_completed",
        "activity_scheduled",
    ]
    # The answer carries exactly the events appended, as stored.
    assert done.inline.appended_events == raw[3:]
    assert done.inline.history_length == len(raw)
    marker = events(raw)[4].workflow_task_completed
    assert marker.last_seen_event_id == 4  # the activity's event: the task's only input
    assert (marker.worker_id, marker.build_id) == ("w1", "b1")
    assert marker.workflow_time.ToMilliseconds() == events(raw)[3].event_time.ToMilliseconds()
    # The second activity went to this worker; no workflow task exists to claim.
    [second] = done.inline.eager_activities
    assert (second.seq, second.worker_id) == (2, "w1")
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 30_000) is None

    # The chain goes on: the next inline decision closes the run.
    closing = InlineWorkflowTask(run_id, done.inline.history_length, [complete(3)])
    final = await store.complete_activity_task_inline(
        NS, second.lease, payload(b"r2"), inline=closing
    )
    assert final.inline is not None
    assert kinds(await history(store))[-3:] == [
        "activity_completed",
        "workflow_task_completed",
        "workflow_completed",
    ]
    outcome = await store.get_outcome(NS, "wf-1", run_id)
    assert outcome.status == "completed"


async def test_other_input_meanwhile_completes_the_activity_alone(store: Store) -> None:
    run_id, activity, length = await first_activity(store)
    # A signal arrives while the activity runs: the worker's copy is stale.
    assert await store.signal_workflow(NS, "wf-1", None, "go", payload(b"s"), "sig-1")
    before = len(await history(store))
    inline = InlineWorkflowTask(run_id, length, [complete(2)])
    done = await store.complete_activity_task_inline(
        NS, activity.lease, payload(b"r1"), inline=inline
    )
    assert done.inline is None
    raw = await history(store)
    assert len(raw) == before + 1 and kinds(raw)[-1] == "activity_completed"
    # The ordinary workflow task carries the signal and the result together.
    task = await claim(store, "w2")
    assert [e.event_id for e in events(task.events)] == list(range(1, len(raw) + 1))


async def test_an_active_workflow_task_blocks_the_inline_decision(store: Store) -> None:
    run_id = await start(store)
    task = await claim(store)
    done = await store.complete_workflow_task_tracked(
        NS,
        task.lease,
        1,
        [schedule(1, "act"), schedule(2, "act")],
        eager=EagerActivities(QUEUE, frozenset({"act"}), 2),
    )
    first, second = done.eager_activities
    # The first result makes a workflow task the ordinary way (no inline decision)...
    plain = await store.complete_activity_task_inline(NS, first.lease, payload(b"a"))
    assert plain.inline is None and plain.workflow_task is None
    length = len(await history(store))
    # ...so a decision made from a history that ends right there is still refused: the
    # queued task would see both results.
    inline = InlineWorkflowTask(run_id, length, [complete(3)])
    refused = await store.complete_activity_task_inline(
        NS, second.lease, payload(b"b"), inline=inline
    )
    assert refused.inline is None
    assert kinds(await history(store))[-1] == "activity_completed"
    wft = await claim(store, "w2")
    assert wft.run_id == run_id


async def test_a_refused_decision_never_costs_the_result(store: Store) -> None:
    run_id, activity, length = await first_activity(store)
    # seq 1 is already taken by the activity: the server refuses the decision.
    inline = InlineWorkflowTask(run_id, length, [schedule(1, "act")])
    done = await store.complete_activity_task_inline(
        NS, activity.lease, payload(b"kept"), inline=inline
    )
    assert done.inline is None
    last = events(await history(store))[-1]
    assert last.HasField("activity_completed")
    assert last.activity_completed.result.data == b"kept"
    assert (await claim(store, "w2")).run_id == run_id


async def test_wrong_run_or_stale_lease_records_nothing(store: Store) -> None:
    run_id, activity, length = await first_activity(store)
    other = InlineWorkflowTask("another-run", length, [complete(2)])
    done = await store.complete_activity_task_inline(
        NS, activity.lease, payload(b"r"), inline=other
    )
    assert done.inline is None
    before = await history(store)
    stale = LeaseRef(
        task_id=activity.task_id, worker_id="w1", fencing_token=activity.fencing_token + 5
    )
    with pytest.raises(LeaseLostError):
        await store.complete_activity_task_inline(
            NS, stale, payload(b"r"), inline=InlineWorkflowTask(run_id, len(before), [])
        )
    assert await history(store) == before


async def test_tracked_completion_reports_appended_events(store: Store) -> None:
    await start(store)
    task = await claim(store)
    done = await store.complete_workflow_task_tracked(NS, task.lease, 1, [schedule(1, "act")])
    raw = await history(store)
    assert done.appended_events == raw[1:]
    assert done.history_length == len(raw)
    assert history_pb2.HistoryEvent.FromString(done.appended_events[0]).HasField(
        "workflow_task_completed"
    )


# --- direct dispatch: a start claims its first workflow task for a waiting worker --------


async def start_claimed(store: Store) -> StartResult:
    """Starts wf-1 (request req-1), claiming its first workflow task for w1."""
    return await store.start_workflow(
        NS,
        "wf-1",
        "Order",
        "1",
        QUEUE,
        payload(b"args"),
        "req-1",
        claim_for=DirectClaim("w1", 30_000),
    )


async def test_start_claims_the_first_task_for_the_named_worker(store: Store) -> None:
    result = await start_claimed(store)
    task = result.workflow_task
    assert task is not None and result.started
    assert (task.run_id, task.worker_id, task.fencing_token, task.attempt) == (
        result.run_id,
        "w1",
        1,
        1,
    )
    assert kinds(task.events) == ["workflow_started"]
    now = await store.now_ms()
    assert now < task.lease_expires_at_ms <= now + 30_000
    # Nobody else can claim it; its lease completes it as usual.
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 30_000) is None
    await store.complete_workflow_task(NS, task.lease, 1, [complete(1)])
    assert (await store.get_outcome(NS, "wf-1", None)).status == "completed"
    # A duplicate start claims nothing.
    again = await start_claimed(store)
    assert (again.started, again.workflow_task) == (False, None)


async def test_a_released_task_is_claimable_again_and_its_old_lease_is_dead(store: Store) -> None:
    result = await start_claimed(store)
    task = result.workflow_task
    assert task is not None
    assert await store.release_workflow_task(NS, task.lease)
    assert not await store.release_workflow_task(NS, task.lease)  # fenced: once only
    retaken = await claim(store, "w2")
    assert (retaken.task_id, retaken.fencing_token, retaken.attempt) == (task.task_id, 2, 1)
    with pytest.raises(LeaseLostError):
        await store.complete_workflow_task(NS, task.lease, 1, [complete(1)])
    assert not await store.release_workflow_task(NS, task.lease)
    await store.complete_workflow_task(NS, retaken.lease, 1, [complete(1)])
