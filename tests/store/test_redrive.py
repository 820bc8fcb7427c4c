"""Redrive: where the failed run's history is cut, what the new run has outstanding, and
the refusals (every backend)."""

from __future__ import annotations

import asyncio

import pytest

from durable_rpc.errors import (
    InvalidArgumentError,
    WorkflowAlreadyStartedError,
    WorkflowNotFailedError,
)
from durable_rpc.search_attributes import memo_to_proto, to_proto
from durable_rpc.store import StartOptions, Store
from durable_rpc.store._records import RedriveResult
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    claim,
    complete,
    events,
    fail_workflow,
    failure,
    history,
    kinds,
    payload,
    schedule,
    start,
    timer,
    wait_db_time,
)


async def decide(store: Store, commands: list[workflow_task_pb2.Command]) -> None:
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), commands)


async def run_activity(store: Store, seq: int, *, ok: bool) -> None:
    task = await store.claim_activity_task(NS, QUEUE, "aw1", [])
    assert task is not None and task.seq == seq, task
    if ok:
        await store.complete_activity_task(NS, task.lease, payload(f"result {seq}".encode()))
    else:
        assert await store.fail_activity_task(NS, task.lease, failure(non_retryable=True)) is None


async def fail_in_activity_3(store: Store, workflow_id: str = "wf-1") -> str:
    """Activities 1 and 2 complete, 3 fails for good, the workflow fails: the run id."""
    run_id = await start(store, workflow_id)
    for seq in (1, 2, 3):
        await decide(store, [schedule(seq)])
        await run_activity(store, seq, ok=seq != 3)
    await decide(store, [fail_workflow(4)])
    return run_id


def last_completed(raw: list[bytes]) -> int:
    return max(e.event_id for e in events(raw) if e.HasField("activity_completed"))


async def test_new_run_keeps_history_up_to_the_last_completed_activity(store: Store) -> None:
    failed_run = await fail_in_activity_3(store)
    old = await history(store, run_id=failed_run)
    boundary = last_completed(old)

    result = await store.redrive_workflow(NS, "wf-1", None, "redrive-1")

    assert result.started and result.run_id != failed_run
    assert (result.resumed_after_event_id, result.kept_activities) == (boundary, 2)
    new = events(await history(store, run_id=result.run_id))
    # Everything up to activity 2's completion, the start rewritten for the new run.
    assert [e.event_id for e in new] == list(range(1, boundary + 1))
    started = new[0].workflow_started
    assert started.run_id == result.run_id and started.request_id == "redrive-1"
    assert started.input == events(old)[0].workflow_started.input
    # Its first decisions are the failed run's: workflow.random() draws from that run's seed.
    assert started.random_seed_run_id == failed_run
    assert [e.SerializeToString() for e in new[1:]] == old[1:boundary]
    # The new run decides from the boundary on: its first task is the kept history, and
    # nothing of activities 1-3 is queued (3 is scheduled again by that decision).
    task = await claim(store)
    assert task.run_id == result.run_id
    assert kinds(task.events) == kinds(await history(store, run_id=result.run_id))
    assert await store.claim_activity_task(NS, QUEUE, "aw1", []) is None
    # Linked both ways; the failed run stays failed.
    old_view = await store.describe(NS, "wf-1", failed_run)
    new_view = await store.describe(NS, "wf-1", result.run_id)
    assert old_view.info.status == "failed" and new_view.info.status == "running"
    assert (old_view.redriven_by_run_id, old_view.redriven_from_run_id) == (result.run_id, "")
    assert (new_view.redriven_from_run_id, new_view.redriven_by_run_id) == (failed_run, "")


async def test_redriven_run_completes_from_the_boundary(store: Store) -> None:
    await fail_in_activity_3(store)
    result = await store.redrive_workflow(NS, "wf-1", None, "redrive-1")
    await decide(store, [schedule(3)])
    await run_activity(store, 3, ok=True)
    await decide(store, [schedule(4)])
    await run_activity(store, 4, ok=True)
    await decide(store, [complete(5)])
    outcome = await store.get_outcome(NS, "wf-1", result.run_id)
    assert outcome.status == "completed"
    completed = [
        e.activity_completed.seq
        for e in events(await history(store, run_id=result.run_id))
        if e.HasField("activity_completed")
    ]
    assert completed == [1, 2, 3, 4]


async def test_an_unseen_failure_is_left_out_and_its_activity_queued_again(
    store: Store,
) -> None:
    """Two activities of one decision: 3 fails, then 4 completes, and the failing decision
    saw both. The new run keeps 4's result and runs 3 again (a new attempt 1)."""
    failed_run = await start(store)
    await decide(store, [schedule(1)])
    await run_activity(store, 1, ok=True)
    await decide(store, [schedule(3), schedule(4)])
    await run_activity(store, 3, ok=False)
    await run_activity(store, 4, ok=True)
    await decide(store, [fail_workflow(5)])
    old = events(await history(store, run_id=failed_run))

    result = await store.redrive_workflow(NS, "wf-1", failed_run, "redrive-1")

    new = events(await history(store, run_id=result.run_id))
    assert result.resumed_after_event_id == last_completed([e.SerializeToString() for e in old])
    assert result.kept_activities == 2
    assert not any(e.HasField("activity_failed") for e in new)
    assert [e.event_id for e in new] == list(range(1, len(new) + 1))
    assert [e.activity_completed.seq for e in new if e.HasField("activity_completed")] == [1, 4]
    again = await store.claim_activity_task(NS, QUEUE, "aw1", [])
    assert again is not None and (again.run_id, again.seq, again.attempt) == (
        result.run_id,
        3,
        1,
    )
    assert await store.claim_activity_task(NS, QUEUE, "aw1", []) is None


async def test_a_failure_a_kept_decision_handled_stays(store: Store) -> None:
    """Activity 1 fails, the workflow reacts (activity 2, a compensation, completes),
    then fails: the failure was seen by a decision the new run keeps, so it stays."""
    failed_run = await start(store)
    await decide(store, [schedule(1)])
    await run_activity(store, 1, ok=False)
    await decide(store, [schedule(2)])
    await run_activity(store, 2, ok=True)
    await decide(store, [fail_workflow(3)])
    old = await history(store, run_id=failed_run)

    result = await store.redrive_workflow(NS, "wf-1", failed_run, "redrive-1")

    new = await history(store, run_id=result.run_id)
    assert new[1:] == old[1 : last_completed(old)]
    assert "activity_failed" in kinds(new)
    assert await store.claim_activity_task(NS, QUEUE, "aw1", []) is None


async def test_a_timer_outstanding_at_the_boundary_fires_in_the_new_run(store: Store) -> None:
    failed_run = await start(store)
    await decide(store, [timer(1, 300), schedule(2)])
    await run_activity(store, 2, ok=True)
    await decide(store, [schedule(3)])
    await run_activity(store, 3, ok=False)
    await decide(store, [fail_workflow(4)])
    started_at = next(
        e.event_time.ToMilliseconds()
        for e in events(await history(store, run_id=failed_run))
        if e.HasField("timer_started")
    )

    result = await store.redrive_workflow(NS, "wf-1", failed_run, "redrive-1")

    await wait_db_time(store, started_at + 300)
    assert (await store.process_due()).fired_timers == 1
    new = events(await history(store, run_id=result.run_id))
    assert new[-1].timer_fired == history_pb2.TimerFired(seq=1)
    assert not any(
        e.HasField("timer_fired") for e in events(await history(store, run_id=failed_run))
    )


async def test_a_repeated_request_returns_the_same_run(store: Store) -> None:
    failed_run = await fail_in_activity_3(store)
    first = await store.redrive_workflow(NS, "wf-1", None, "redrive-1")
    # By workflow id alone the latest run is now the new (running) one: the request id
    # still answers the redrive it made.
    again = await store.redrive_workflow(NS, "wf-1", None, "redrive-1")
    assert (again.run_id, again.started) == (first.run_id, False)
    assert (again.resumed_after_event_id, again.kept_activities) == (
        first.resumed_after_event_id,
        first.kept_activities,
    )
    same = await store.redrive_workflow(NS, "wf-1", failed_run, "redrive-1")
    assert (same.run_id, same.started) == (first.run_id, False)


async def test_refusals(store: Store) -> None:
    await start(store)
    with pytest.raises(WorkflowNotFailedError, match="running"):
        await store.redrive_workflow(NS, "wf-1", None, "r1")
    await decide(store, [complete(1)])
    with pytest.raises(WorkflowNotFailedError, match="completed"):
        await store.redrive_workflow(NS, "wf-1", None, "r2")

    failed_run = await fail_in_activity_3(store, "wf-2")
    first = await store.redrive_workflow(NS, "wf-2", failed_run, "r3")
    # A second redrive of the same failed run (another request) would run activities
    # again in two runs.
    with pytest.raises(WorkflowAlreadyStartedError, match="already redriven"):
        await store.redrive_workflow(NS, "wf-2", failed_run, "r4")
    # The new run fails too: it can be redriven itself, once it is closed.
    await decide(store, [fail_workflow(3)])
    second = await store.redrive_workflow(NS, "wf-2", None, "r5")
    # The seed stays the first run's along the chain.
    restart = events(await history(store, "wf-2", second.run_id))[0].workflow_started
    assert restart.random_seed_run_id == failed_run
    assert (await store.describe(NS, "wf-2", second.run_id)).redriven_from_run_id == first.run_id

    # Another run of the id is open.
    failed_run = await fail_in_activity_3(store, "wf-3")
    await start(store, "wf-3", request_id="fresh-start")
    with pytest.raises(WorkflowAlreadyStartedError, match="open run"):
        await store.redrive_workflow(NS, "wf-3", failed_run, "r6")


async def test_a_child_open_at_the_boundary_is_refused(store: Store) -> None:
    failed_run = await start(store)
    child = workflow_task_pb2.StartChildWorkflow(
        workflow_type="Kid",
        workflow_id="kid",
        task_queue="kids",
        input=payload_pb2.Payload(data=b"[]"),
        parent_close_policy="ABANDON",
    )
    await decide(store, [workflow_task_pb2.Command(seq=1, start_child_workflow=child), schedule(2)])
    await run_activity(store, 2, ok=True)
    await decide(store, [fail_workflow(3)])
    with pytest.raises(InvalidArgumentError, match="child workflow 'kid'"):
        await store.redrive_workflow(NS, "wf-1", failed_run, "redrive-1")
    # Nothing was created (the refusal rolled the transaction back).
    view = await store.describe(NS, "wf-1", None)
    assert (view.info.run_id, view.redriven_by_run_id) == (failed_run, "")


async def test_concurrent_redrives_of_one_run_make_one_new_run(store: Store) -> None:
    failed_run = await fail_in_activity_3(store)
    results = await asyncio.gather(
        *(store.redrive_workflow(NS, "wf-1", failed_run, f"r{i}") for i in range(2)),
        return_exceptions=True,
    )
    made = [r for r in results if isinstance(r, RedriveResult)]
    refused = [r for r in results if isinstance(r, WorkflowAlreadyStartedError)]
    assert (len(made), len(refused)) == (1, 1), results

    failed_run = await fail_in_activity_3(store, "wf-2")
    same = await asyncio.gather(
        *(store.redrive_workflow(NS, "wf-2", failed_run, "one-request") for _ in range(2))
    )
    assert len({r.run_id for r in same}) == 1
    assert sorted(r.started for r in same) == [False, True]


async def test_memo_search_attributes_and_timeouts_are_carried(store: Store) -> None:
    memo = memo_to_proto({"note": "vip"}).SerializeToString()
    attrs = to_proto({"CustomerId": "c-7"}).SerializeToString()
    await store.start_workflow(
        NS,
        "wf-1",
        "Order",
        "1",
        QUEUE,
        payload(b"args"),
        "start-1",
        options=StartOptions(memo=memo, search_attributes=attrs, execution_timeout_ms=60_000),
    )
    for seq in (1, 2):
        await decide(store, [schedule(seq)])
        await run_activity(store, seq, ok=seq == 1)
    await decide(store, [fail_workflow(3)])

    result = await store.redrive_workflow(NS, "wf-1", None, "redrive-1")

    view = await store.describe(NS, "wf-1", result.run_id)
    assert view.info.memo == memo and view.info.search_attributes == attrs
    started = events(await history(store, run_id=result.run_id))[0].workflow_started
    assert started.execution_timeout.ToMilliseconds() == 60_000
    # Listed by its attributes: the failed run is closed, the new one open.
    runs, _ = await store.list_runs(
        NS, "running", None, None, None, 10, None, query='CustomerId = "c-7"'
    )
    assert [run.run_id for run in runs] == [result.run_id]


async def test_a_cooperative_cancel_request_leaves_the_new_runs_activities_to_the_code(
    store: Store,
) -> None:
    # Activity 2 is outstanding after the kept events, which include the run's
    # (cooperative) cancellation request: its new attempt is not told to stop, as the
    # request never told the failed run's attempts (the workflow code cancels by policy).
    await start(store)
    await decide(store, [schedule(1), schedule(2)])
    await store.request_cancel(NS, "wf-1", None, "stop")
    await run_activity(store, 1, ok=True)
    await decide(store, [fail_workflow(3)])
    result = await store.redrive_workflow(NS, "wf-1", None, "redrive-cancel")
    assert "cancel_requested" in kinds(await history(store, run_id=result.run_id))
    task = await store.claim_activity_task(NS, QUEUE, "aw1", [])
    assert task is not None and task.seq == 2
    assert not (await store.heartbeat_activity_task(NS, task.lease, None)).cancel_requested
