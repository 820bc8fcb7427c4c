"""Workflow tasks: claim, complete with command events, fencing, failure, reclaim."""

from __future__ import annotations

import functools

import pytest

from durable_rpc.errors import InvalidArgumentError, LeaseLostError
from durable_rpc.store import ClaimedWorkflowTask, LeaseRef, Store
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    RecordingListener,
    activity_options,
    cancel_timer,
    claim,
    complete,
    events,
    eventually,
    failure,
    history,
    kinds,
    payload,
    schedule,
    start,
    timer,
    wait_db_time,
)


async def test_claim_complete_appends_marker_and_command_events(
    store: Store, listener: RecordingListener
) -> None:
    await start(store)
    task = await claim(store, "w1")
    assert (task.attempt, task.fencing_token) == (1, 1)
    assert task.lease_expires_at_ms == task.workflow_time_ms + 30_000
    assert (task.workflow_type, task.workflow_version) == ("Order", "1")
    await store.complete_workflow_task(
        NS,
        task.lease,
        1,
        [schedule(1, "charge"), schedule(2, "ship", task_queue="other"), timer(3, 60_000)],
        build_id="build-7",
    )
    evs = events(await history(store))
    assert [e.WhichOneof("attributes") for e in evs] == [
        "workflow_started",
        "workflow_task_completed",
        "activity_scheduled",
        "activity_scheduled",
        "timer_started",
    ]
    assert [e.event_id for e in evs] == [1, 2, 3, 4, 5]
    marker = evs[1].workflow_task_completed
    assert marker.last_seen_event_id == 1
    assert marker.workflow_time.ToMilliseconds() == task.workflow_time_ms
    assert (marker.worker_id, marker.build_id) == ("w1", "build-7")
    charge = evs[2].activity_scheduled
    assert (charge.seq, charge.activity_type, charge.task_queue) == (1, "charge", QUEUE)
    assert charge.input.data == b"in"
    assert charge.options.start_to_close_timeout.ToMilliseconds() == 5_000
    assert evs[3].activity_scheduled.task_queue == "other"
    assert evs[4].timer_started.seq == 3
    assert evs[4].timer_started.duration.ToMilliseconds() == 60_000
    # The activities are claimable on their queues; no new workflow task (no new input).
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 1000) is None
    first = await store.claim_activity_task(NS, QUEUE, "w2", [])
    assert first is not None and first.activity_type == "charge"
    other = await store.claim_activity_task(NS, "other", "w2", [])
    assert other is not None and other.activity_type == "ship"
    description = await store.describe(NS, "wf-1", None)
    assert description.workflow_task_attempt == 1
    assert {(p.seq, p.state, p.worker_id) for p in description.pending_activities} == {
        (1, "leased", "w2"),
        (2, "leased", "w2"),
    }
    await listener.wait_for(
        lambda: (
            (NS, "other", "activity") in listener.tasks
            and (NS, QUEUE, "activity") in listener.tasks
            and (NS, QUEUE, "workflow") in listener.tasks
        ),
        "tasks_available for both queues",
    )
    await listener.wait_for(
        lambda: any(d >= task.workflow_time_ms + 60_000 for d in listener.due), "timer due_at"
    )


async def test_complete_workflow_closes_run_and_cancels_pending_work(
    store: Store, listener: RecordingListener
) -> None:
    run_id = await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1), timer(2, 10)])
    await store.signal_workflow(NS, "wf-1", None, "s", payload(b""), "s1")
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [complete(3, b"ok")])
    assert kinds(await history(store))[-1] == "workflow_completed"
    outcome = await store.get_outcome(NS, "wf-1", None)
    assert outcome.status == "completed"
    assert outcome.result == payload_pb2.Payload(data=b"ok").SerializeToString()
    assert await store.claim_activity_task(NS, QUEUE, "w", []) is None
    await wait_db_time(store, task.workflow_time_ms + 20)
    report = await store.process_due()
    assert report.fired_timers == 0
    assert kinds(await history(store))[-1] == "workflow_completed"
    await listener.wait_for(lambda: (NS, run_id) in listener.closed, "run_closed")


async def test_stale_token_after_reclaim_is_lease_lost_and_new_owner_wins(store: Store) -> None:
    await start(store)
    old = await claim(store, "w1", lease_ms=50)
    await wait_db_time(store, old.lease_expires_at_ms + 1)
    new = await claim(store, "w2", lease_ms=30_000)
    assert new.task_id == old.task_id
    assert new.fencing_token == old.fencing_token + 1
    assert new.attempt == 2
    before = await history(store)
    with pytest.raises(LeaseLostError):
        await store.complete_workflow_task(NS, old.lease, 1, [complete(1, b"stale")])
    with pytest.raises(LeaseLostError):
        await store.fail_workflow_task(NS, old.lease, failure())
    assert await history(store) == before
    await store.complete_workflow_task(NS, new.lease, 1, [complete(1, b"fresh")])
    outcome = await store.get_outcome(NS, "wf-1", None)
    assert outcome.result == payload_pb2.Payload(data=b"fresh").SerializeToString()
    # The stale writer still loses after the new owner completed.
    with pytest.raises(LeaseLostError):
        await store.complete_workflow_task(NS, old.lease, 1, [complete(1, b"stale")])


async def test_wrong_worker_and_wrong_task_are_lease_lost(store: Store) -> None:
    await start(store)
    task = await claim(store, "w1")
    before = await history(store)
    for lease in (
        LeaseRef(task.task_id, "intruder", task.fencing_token),
        LeaseRef(task.task_id, "w1", task.fencing_token + 1),
        LeaseRef(task.task_id + 1000, "w1", task.fencing_token),
    ):
        with pytest.raises(LeaseLostError):
            await store.complete_workflow_task(NS, lease, 1, [complete(1)])
    assert await history(store) == before
    await store.complete_workflow_task(NS, task.lease, 1, [])
    assert kinds(await history(store)) == ["workflow_started", "workflow_task_completed"]


async def test_duplicate_completion_with_same_lease_is_idempotent(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1)])
    after_first = await history(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1)])
    assert await history(store) == after_first
    # Only one activity was created.
    assert await store.claim_activity_task(NS, QUEUE, "w", []) is not None
    assert await store.claim_activity_task(NS, QUEUE, "w", []) is None
    # A failure report for a lease that completed is not a duplicate: lease lost.
    with pytest.raises(LeaseLostError):
        await store.fail_workflow_task(NS, task.lease, failure())


async def test_fencing_token_strictly_increases_across_reclaims(
    store: Store, listener: RecordingListener
) -> None:
    await start(store)
    tokens: list[int] = []
    attempts: list[int] = []
    for i in range(4):
        task = await claim(store, f"w{i}", lease_ms=30)
        tokens.append(task.fencing_token)
        attempts.append(task.attempt)
        await wait_db_time(store, task.lease_expires_at_ms + 1)
        if i % 2:
            # process_due may release the expired lease first; the claim still raises both.
            await store.process_due()
    assert tokens == sorted(set(tokens)) and len(tokens) == 4
    assert attempts == [1, 2, 3, 4]
    # The last expired lease was released by process_due: the next try is attempt 5.
    assert (await store.describe(NS, "wf-1", None)).workflow_task_attempt == 5
    final = await claim(store, "w-last")
    assert (final.attempt, final.fencing_token) == (5, tokens[-1] + 1)
    await listener.wait_for(
        lambda: listener.tasks.count((NS, QUEUE, "workflow")) >= 2, "expired lease released"
    )


@pytest.mark.parametrize(
    "commands",
    [
        pytest.param([schedule(0)], id="seq-zero"),
        pytest.param([schedule(1), timer(1, 10)], id="duplicate-seq"),
        pytest.param([schedule(5)], id="seq-already-used"),
        pytest.param([schedule(2, "")], id="empty-activity-type"),
        pytest.param([timer(2, -5)], id="negative-timer"),
        pytest.param([schedule(2, options=activity_options(start_to_close_ms=-1))], id="neg-opt"),
        pytest.param([cancel_timer(2, 99)], id="cancel-unknown-timer"),
        pytest.param([cancel_timer(2, 5)], id="cancel-non-timer"),
        pytest.param([complete(2), schedule(3)], id="terminal-not-last"),
        pytest.param([workflow_task_pb2.Command(seq=2)], id="no-kind"),
    ],
)
async def test_invalid_commands_change_nothing(
    store: Store, commands: list[workflow_task_pb2.Command]
) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(5)])
    await store.signal_workflow(NS, "wf-1", None, "s", payload(b""), "s1")
    task = await claim(store)
    before = await history(store)
    description = await store.describe(NS, "wf-1", None)
    with pytest.raises(InvalidArgumentError):
        await store.complete_workflow_task(NS, task.lease, len(task.events), commands)
    assert await history(store) == before
    assert await store.describe(NS, "wf-1", None) == description
    # The lease is intact: the same worker can still complete the task.
    await store.complete_workflow_task(NS, task.lease, len(task.events), [timer(6, 1000)])
    assert kinds(await history(store))[-1] == "timer_started"


async def test_last_seen_event_id_must_be_inside_history(store: Store) -> None:
    await start(store)
    task = await claim(store)
    with pytest.raises(InvalidArgumentError):
        await store.complete_workflow_task(NS, task.lease, 7, [])
    assert len(await history(store)) == 1


async def test_new_input_during_the_task_queues_a_new_task(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.signal_workflow(NS, "wf-1", None, "during", payload(b""), "s1")
    # The signal is not claimable while the run's workflow task is leased.
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 1000) is None
    await store.complete_workflow_task(NS, task.lease, 1, [timer(1, 60_000)])
    nxt = await claim(store, "w2")
    assert kinds(nxt.events) == [
        "workflow_started",
        "signal_received",
        "workflow_task_completed",
        "timer_started",
    ]
    # Completing with everything seen and no new input leaves no task behind.
    await store.complete_workflow_task(NS, nxt.lease, len(nxt.events), [])
    assert await store.claim_workflow_task(NS, QUEUE, "w3", 1000) is None


async def test_failed_workflow_task_backs_off_and_keeps_run_open(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.fail_workflow_task(NS, task.lease, failure("nondeterminism", "NondeterminismError"))
    # Duplicate failure report of the same lease is idempotent (no backoff to tell).
    repeated = failure("nondeterminism", "NondeterminismError")
    assert await store.fail_workflow_task(NS, task.lease, repeated) is None
    description = await store.describe(NS, "wf-1", None)
    assert description.info.status == "running"
    assert description.workflow_task_attempt == 2
    assert description.last_workflow_task_failure is not None
    assert payload_pb2.Failure.FromString(description.last_workflow_task_failure).type == (
        "NondeterminismError"
    )
    assert kinds(await history(store)) == ["workflow_started"]
    with pytest.raises(LeaseLostError):
        await store.complete_workflow_task(NS, task.lease, 1, [])

    async def reclaim() -> ClaimedWorkflowTask | None:
        return await store.claim_workflow_task(NS, QUEUE, "w2", 30_000)

    retry = await eventually(reclaim, what="workflow task retry")
    assert retry.attempt == 2
    assert retry.fencing_token == task.fencing_token + 1
    await store.complete_workflow_task(NS, retry.lease, 1, [])
    description = await store.describe(NS, "wf-1", None)
    assert description.workflow_task_attempt == 1
    assert description.last_workflow_task_failure is None


def grew(values: list[int], size: int) -> bool:
    return len(values) > size


async def test_backoff_grows_with_attempts(store: Store, listener: RecordingListener) -> None:
    await start(store)
    for expected in (20, 40, 80):  # FAST options: 20ms doubling

        async def reclaim() -> ClaimedWorkflowTask | None:
            return await store.claim_workflow_task(NS, QUEUE, "w", 30_000)

        task = await eventually(reclaim, what="workflow task")
        await listener.wait_for(lambda: bool(listener.due), "lease due_at")
        seen = len(listener.due)
        before = await store.now_ms()
        assert await store.fail_workflow_task(NS, task.lease, failure()) == expected
        after = await store.now_ms()
        await listener.wait_for(functools.partial(grew, listener.due, seen), "backoff due_at")
        visible_at = listener.due[-1]
        # The failure happened at some db time in [before, after].
        assert before + expected <= visible_at <= after + expected


async def test_at_most_one_workflow_task_per_run(store: Store) -> None:
    await start(store)
    for i in range(5):
        await store.signal_workflow(NS, "wf-1", None, "s", payload(b""), f"s{i}")
    task = await claim(store)
    assert len(task.events) == 6
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 1000) is None
