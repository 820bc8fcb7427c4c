"""Cooperative cancellation in the store: a request's cleanup deadline (database clock,
recorded in CancelRequested and on the run) terminates a run still open then, in the
due pass; without one, or when the run closed first, nothing happens; a second request
keeps the first deadline; the run's activities are not told to stop by the request."""

from __future__ import annotations

from durable_rpc.store import StartOptions, Store
from durable_rpc.v1 import history_pb2, payload_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    cancel_workflow,
    claim,
    events,
    eventually,
    history,
    payload,
    start,
    wait_db_time,
)


def cancel_event(raw: list[bytes]) -> history_pb2.HistoryEvent:
    (event,) = [e for e in events(raw) if e.HasField("cancel_requested")]
    return event


async def closed(store: Store) -> str | None:
    """Runs the due pass; the run's status once it is no longer running."""
    await store.process_due()
    status = (await store.get_outcome(NS, "wf-1", None)).status
    return None if status == "running" else status


async def test_the_cleanup_deadline_terminates_a_run_still_open(store: Store) -> None:
    await start(store)
    before = await store.now_ms()
    assert await store.request_cancel(NS, "wf-1", None, "user asked", cleanup_timeout_ms=200)
    event = cancel_event(await history(store))
    deadline = event.cancel_requested.cleanup_deadline.ToMilliseconds()
    requested = event.event_time.ToMilliseconds()
    assert event.cancel_requested.reason == "user asked"
    assert event.cancel_requested.cooperative
    assert deadline == requested + 200 and requested >= before
    # Not before the deadline (the database clock decides).
    await store.process_due()
    assert (await store.get_outcome(NS, "wf-1", None)).status == "running"

    await wait_db_time(store, deadline)
    assert await eventually(lambda: closed(store), what="the cleanup deadline") == "terminated"
    last = events(await history(store))[-1]
    assert last.workflow_terminated.reason == "CLEANUP_DEADLINE_EXCEEDED"
    assert (await store.describe(NS, "wf-1", None)).info.status == "terminated"
    failure = payload_pb2.Failure.FromString(
        (await store.get_outcome(NS, "wf-1", None)).failure or b""
    )
    assert failure.message.startswith("CLEANUP_DEADLINE_EXCEEDED")
    assert failure.cause.type == "CLEANUP_DEADLINE_EXCEEDED"
    # The run's tasks ended with it.
    assert await store.claim_workflow_task(NS, QUEUE, "w1", 30_000) is None


async def test_a_second_request_keeps_the_first_deadline(store: Store) -> None:
    await start(store)
    await store.request_cancel(NS, "wf-1", None, "first", cleanup_timeout_ms=60_000)
    assert not await store.request_cancel(NS, "wf-1", None, "second", cleanup_timeout_ms=1)
    event = cancel_event(await history(store))
    assert event.cancel_requested.reason == "first"
    await wait_db_time(store, await store.now_ms() + 20)
    await store.process_due()
    assert (await store.get_outcome(NS, "wf-1", None)).status == "running"


async def test_an_earlier_execution_timeout_still_times_the_run_out(store: Store) -> None:
    await store.start_workflow(
        NS,
        "wf-1",
        "Order",
        "",
        QUEUE,
        payload(b"a"),
        "r",
        options=StartOptions(execution_timeout_ms=150),
    )
    await store.request_cancel(NS, "wf-1", None, "stop", cleanup_timeout_ms=600_000)
    assert await eventually(lambda: closed(store), what="the execution timeout") == "timed_out"


async def test_a_run_that_closes_in_time_is_left_alone(store: Store) -> None:
    await start(store)
    await store.request_cancel(NS, "wf-1", None, "stop", cleanup_timeout_ms=100)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [cancel_workflow(1)])
    await wait_db_time(store, await store.now_ms() + 150)
    await store.process_due()
    assert (await store.get_outcome(NS, "wf-1", None)).status == "cancelled"
    assert "workflow_terminated" not in [
        e.WhichOneof("attributes") for e in events(await history(store))
    ]


async def test_without_a_cleanup_timeout_no_deadline_is_recorded(store: Store) -> None:
    await start(store)
    await store.request_cancel(NS, "wf-1", None, "stop")
    event = cancel_event(await history(store))
    assert not event.cancel_requested.HasField("cleanup_deadline")
    assert event.cancel_requested.cooperative
    assert (await store.get_outcome(NS, "wf-1", None)).status == "running"
