"""Update requests waiting outside history, kept in the store so any replica hands them
out with the run's workflow task (on every backend)."""

from __future__ import annotations

import pytest

from durable_rpc.errors import ResourceExhaustedError
from durable_rpc.store import InlineWorkflowTask, PendingUpdateRequest, Store, _ops_updates
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    RecordingListener,
    claim,
    complete,
    failure,
    history,
    kinds,
    payload,
    start,
)
from tests.store.test_inline import first_activity


def accept(seq: int, update_id: str) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        accept_update=workflow_task_pb2.AcceptUpdate(
            update_id=update_id, update_name="rename", input=payload_pb2.Payload(data=b"x")
        ),
    )


async def request(store: Store, run_id: str, update_id: str) -> bool:
    return await store.request_update(
        NS, run_id, update_id, "rename", payload(f"args of {update_id}".encode())
    )


def pending(update_id: str) -> PendingUpdateRequest:
    return PendingUpdateRequest(update_id, "rename", payload(f"args of {update_id}".encode()))


async def test_a_request_rides_with_every_task_until_a_decision_settles_it(
    store: Store, listener: RecordingListener
) -> None:
    run_id = await start(store)
    first = await claim(store)
    assert first.pending_updates == ()
    await store.complete_workflow_task(NS, first.lease, 1, [])

    assert await request(store, run_id, "u-1")
    assert await request(store, run_id, "u-2")
    assert await request(store, run_id, "u-1"), "a repeated id is the same request"
    # The request queued a workflow task to deliver it.
    second = await claim(store)
    assert second.pending_updates == (pending("u-1"), pending("u-2"))

    # Rejecting u-1 and accepting u-2 settles both, and wakes their callers.
    await store.complete_workflow_task_tracked(
        NS,
        second.lease,
        len(second.events),
        [accept(1, "u-2")],
        rejected_updates=[("u-1", failure("no", "ValueError"))],
    )
    await listener.wait_for(
        lambda: {(NS, "u-1"), (NS, "u-2")} <= set(listener.updates), "the settled updates"
    )
    rejection = await store.update_rejection(NS, run_id, "u-1")
    assert rejection is not None
    assert payload_pb2.Failure.FromString(rejection).message == "no"
    assert await store.update_rejection(NS, run_id, "u-2") is None
    assert "update_accepted" in kinds(await history(store))

    # A rejected id stays rejected; nothing is pending any more.
    assert await request(store, run_id, "u-1")
    assert await store.claim_workflow_task(NS, QUEUE, "w1", 30_000) is None


async def test_a_pending_request_stops_inline_decisions(store: Store) -> None:
    run_id, activity, length = await first_activity(store)
    assert await request(store, run_id, "u-1")
    done = await store.complete_activity_task_inline(
        NS,
        activity.lease,
        payload(b"r1"),
        inline=InlineWorkflowTask(run_id, length, [complete(2)]),
    )
    assert done.inline is None, "the decision waits for the task that carries the update"
    task = await claim(store)
    assert task.pending_updates == (pending("u-1"),)


async def test_closing_the_run_drops_its_pending_requests(store: Store) -> None:
    run_id = await start(store)
    await store.complete_workflow_task(NS, (await claim(store)).lease, 1, [])
    assert await request(store, run_id, "u-1")
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [complete(1)])
    assert not await request(store, run_id, "u-2"), "the run is not running"
    assert await store.update_rejection(NS, run_id, "u-1") is None


async def test_too_many_pending_requests_are_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ops_updates, "MAX_PENDING_UPDATES_PER_RUN", 2)
    run_id = await start(store)
    assert await request(store, run_id, "u-1")
    assert await request(store, run_id, "u-2")
    with pytest.raises(ResourceExhaustedError, match="2 updates of run"):
        await request(store, run_id, "u-3")
    # A forgotten request makes room.
    await store.forget_update(NS, run_id, "u-1")
    assert await request(store, run_id, "u-3")
    task = await claim(store)
    assert [u.update_id for u in task.pending_updates] == ["u-2", "u-3"]


async def update_with_start(
    store: Store, update_id: str, workflow_id: str = "wf-1"
) -> tuple[str, bool]:
    result = await store.update_with_start(
        NS,
        workflow_id,
        "Order",
        "1",
        QUEUE,
        payload(b"start args"),
        update_id,
        "rename",
        payload(f"args of {update_id}".encode()),
    )
    return result.run_id, result.started


async def test_update_with_start_starts_a_run_whose_first_task_carries_the_request(
    store: Store,
) -> None:
    run_id, started = await update_with_start(store, "u-1")
    assert started
    assert await update_with_start(store, "u-1") == (run_id, False), "a retry"
    task = await claim(store)
    assert task.run_id == run_id
    assert kinds(task.events) == ["workflow_started"]
    assert task.pending_updates == (pending("u-1"),)

    # With the run open, another update goes to it; nothing is started.
    assert await update_with_start(store, "u-2") == (run_id, False)
    await store.complete_workflow_task_tracked(
        NS, task.lease, len(task.events), [accept(1, "u-1"), complete(2)]
    )
    # The run closed: a retried call still names the run it started...
    assert await update_with_start(store, "u-1") == (run_id, False)
    # ...while a new update id starts a new run.
    next_run, started = await update_with_start(store, "u-3")
    assert started and next_run != run_id
