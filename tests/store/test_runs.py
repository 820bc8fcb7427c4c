"""Runs: start, signal, cancel, terminate, describe, history, outcome, list."""

from __future__ import annotations

import asyncio

import pytest

from durable_rpc.errors import (
    InvalidArgumentError,
    NamespaceNotFoundError,
    NotFoundError,
    WorkflowAlreadyStartedError,
    WorkflowNotRunningError,
)
from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    RecordingListener,
    cancel_workflow,
    claim,
    complete,
    events,
    fail_workflow,
    history,
    kinds,
    payload,
    schedule,
    start,
)


async def test_start_appends_workflow_started_and_queues_one_task(store: Store) -> None:
    before = await store.now_ms()
    result = await store.start_workflow(NS, "wf-1", "Order", "", QUEUE, payload(b"args"), "req-1")
    assert result.started
    [started] = events(await history(store))
    assert started.event_id == 1
    attrs = started.workflow_started
    assert (attrs.workflow_type, attrs.workflow_version) == ("Order", "1")
    assert (attrs.workflow_id, attrs.run_id, attrs.task_queue) == ("wf-1", result.run_id, QUEUE)
    assert attrs.input.data == b"args"
    assert attrs.request_id == "req-1"
    assert started.event_time.ToMilliseconds() >= before

    task = await claim(store)
    assert task.run_id == result.run_id
    assert kinds(task.events) == ["workflow_started"]
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 30_000) is None


async def test_start_is_idempotent_by_request_id(store: Store) -> None:
    first = await store.start_workflow(NS, "wf-1", "Order", "1", QUEUE, payload(b"a"), "req-1")
    again = await store.start_workflow(NS, "wf-1", "Order", "1", QUEUE, payload(b"a"), "req-1")
    assert again.run_id == first.run_id
    assert not again.started
    assert len(await history(store)) == 1
    await claim(store)
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 30_000) is None


async def test_open_workflow_id_with_another_request_is_already_started(store: Store) -> None:
    await start(store, "wf-1", request_id="req-1")
    with pytest.raises(WorkflowAlreadyStartedError):
        await start(store, "wf-1", request_id="req-2")
    runs, _ = await store.list_runs(NS, None, None, None, None, 10, None)
    assert len(runs) == 1


async def test_closed_workflow_id_starts_a_new_run(store: Store) -> None:
    old = await start(store, "wf-1", request_id="req-1")
    await store.terminate(NS, "wf-1", None, "test")
    new = await start(store, "wf-1", request_id="req-2")
    assert new != old
    # The latest run is the default for run_id None, and each run keeps its history.
    assert (await store.describe(NS, "wf-1", None)).info.run_id == new
    assert kinds(await history(store, "wf-1", old)) == ["workflow_started", "workflow_terminated"]
    assert kinds(await history(store, "wf-1", new)) == ["workflow_started"]
    # The first request id still answers with its own run.
    replay = await store.start_workflow(NS, "wf-1", "Order", "1", QUEUE, payload(b""), "req-1")
    assert (replay.run_id, replay.started) == (old, False)


async def test_concurrent_starts_of_one_workflow_id_open_one_run(store: Store) -> None:
    results = await asyncio.gather(
        *(start(store, "wf-1", request_id=f"req-{i}") for i in range(10)),
        return_exceptions=True,
    )
    run_ids = [r for r in results if isinstance(r, str)]
    assert len(run_ids) == 1
    assert all(isinstance(r, WorkflowAlreadyStartedError) for r in results if r not in run_ids)


async def test_namespaces(store: Store) -> None:
    assert await store.namespace_exists("default")
    assert not await store.namespace_exists("team-a")
    with pytest.raises(NamespaceNotFoundError):
        await store.start_workflow("team-a", "wf", "T", "1", QUEUE, payload(b""), "r")
    with pytest.raises(NamespaceNotFoundError):
        await store.claim_workflow_task("team-a", QUEUE, "w1", 1000)
    await store.ensure_namespace("team-a")
    await store.ensure_namespace("team-a")  # idempotent
    assert await store.namespace_exists("team-a")
    run = await store.start_workflow("team-a", "wf", "T", "1", QUEUE, payload(b""), "r")
    # Namespaces are isolated: the same workflow id is free in default.
    assert await store.claim_workflow_task(NS, QUEUE, "w1", 1000) is None
    with pytest.raises(NotFoundError):
        await store.describe(NS, "wf", None)
    task = await store.claim_workflow_task("team-a", QUEUE, "w1", 1000)
    assert task is not None and task.run_id == run.run_id


async def test_invalid_start_arguments(store: Store) -> None:
    with pytest.raises(InvalidArgumentError):
        await store.start_workflow(NS, "", "T", "1", QUEUE, payload(b""), "r")
    with pytest.raises(InvalidArgumentError):
        await store.start_workflow(NS, "wf", "", "1", QUEUE, payload(b""), "r")
    with pytest.raises(InvalidArgumentError):
        await store.start_workflow(NS, "wf", "T", "1", "", payload(b""), "r")
    runs, _ = await store.list_runs(NS, None, None, None, None, 10, None)
    assert runs == []


async def test_signal_is_deduplicated_by_request_id(store: Store) -> None:
    run_id = await start(store)
    assert await store.signal_workflow(NS, "wf-1", None, "go", payload(b"1"), "sig-1")
    assert not await store.signal_workflow(NS, "wf-1", run_id, "go", payload(b"1"), "sig-1")
    assert await store.signal_workflow(NS, "wf-1", "", "go", payload(b"2"), "sig-2")
    evs = events(await history(store))
    signals = [e.signal_received for e in evs if e.HasField("signal_received")]
    assert [(s.signal_name, s.input.data, s.request_id) for s in signals] == [
        ("go", b"1", "sig-1"),
        ("go", b"2", "sig-2"),
    ]
    # Still exactly one workflow task for the run.
    task = await claim(store)
    assert len(task.events) == 3
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 30_000) is None


async def test_signal_errors(store: Store) -> None:
    with pytest.raises(NotFoundError):
        await store.signal_workflow(NS, "missing", None, "go", payload(b""), "s")
    run_id = await start(store)
    with pytest.raises(NotFoundError):
        await store.signal_workflow(NS, "wf-1", "not-a-run", "go", payload(b""), "s")
    await store.signal_workflow(NS, "wf-1", run_id, "go", payload(b""), "s-before")
    await store.terminate(NS, "wf-1", run_id, "stop")
    with pytest.raises(WorkflowNotRunningError):
        await store.signal_workflow(NS, "wf-1", run_id, "go", payload(b""), "s-after")
    # A retry of a signal delivered before the close is still acknowledged as a duplicate.
    assert not await store.signal_workflow(NS, "wf-1", run_id, "go", payload(b""), "s-before")


async def test_request_cancel_appends_once(store: Store) -> None:
    await start(store)
    await store.request_cancel(NS, "wf-1", None, "user asked")
    await store.request_cancel(NS, "wf-1", None, "again")
    evs = events(await history(store))
    cancels = [e.cancel_requested.reason for e in evs if e.HasField("cancel_requested")]
    assert cancels == ["user asked"]
    description = await store.describe(NS, "wf-1", None)
    assert description.cancel_requested
    assert description.info.status == "running"

    task = await claim(store)
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [cancel_workflow(1)],
    )
    outcome = await store.get_outcome(NS, "wf-1", None)
    assert outcome.status == "cancelled"
    with pytest.raises(WorkflowNotRunningError):
        await store.request_cancel(NS, "wf-1", None, "late")


async def test_terminate_closes_run_and_cancels_tasks(
    store: Store, listener: RecordingListener
) -> None:
    run_id = await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1)])
    await store.signal_workflow(NS, "wf-1", None, "go", payload(b""), "s1")  # queues a task
    held = await claim(store)
    await store.terminate(NS, "wf-1", None, "operator")
    # The holder of the run's workflow task learns that the run is closed.
    with pytest.raises(WorkflowNotRunningError):
        await store.complete_workflow_task(NS, held.lease, len(held.events), [complete(9)])
    assert kinds(await history(store))[-1] == "workflow_terminated"
    outcome = await store.get_outcome(NS, "wf-1", run_id)
    assert outcome.status == "terminated"
    assert outcome.failure is not None
    assert payload_pb2.Failure.FromString(outcome.failure).message == "operator"
    info = (await store.describe(NS, "wf-1", None)).info
    assert info.close_time_ms is not None and info.close_time_ms >= info.start_time_ms
    # Nothing of the run is claimable any more.
    assert await store.claim_workflow_task(NS, QUEUE, "w1", 1000) is None
    assert await store.claim_activity_task(NS, QUEUE, "w1", []) is None
    assert (await store.describe(NS, "wf-1", None)).pending_activities == []
    with pytest.raises(WorkflowNotRunningError):
        await store.terminate(NS, "wf-1", None, "again")
    await listener.wait_for(lambda: (NS, run_id) in listener.closed, "run_closed")
    # The notification carries the outcome the store answers (result polls reuse it).
    assert listener.outcomes[listener.closed.index((NS, run_id))] == outcome


async def test_close_notification_carries_the_stored_outcome(
    store: Store, listener: RecordingListener
) -> None:
    run_id = await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [complete(1, b"done!")])
    await listener.wait_for(lambda: (NS, run_id) in listener.closed, "run_closed")
    notified = listener.outcomes[listener.closed.index((NS, run_id))]
    assert notified == await store.get_outcome(NS, "wf-1", run_id)
    assert notified is not None and notified.status == "completed"


async def test_outcome_of_completed_and_failed_runs(store: Store) -> None:
    await start(store, "ok")
    await start(store, "bad")
    for _ in range(2):
        task = await claim(store)
        command = complete(1, b"result") if task.workflow_id == "ok" else fail_workflow(1, "no")
        await store.complete_workflow_task(NS, task.lease, len(task.events), [command])
    ok = await store.get_outcome(NS, "ok", None)
    assert ok.status == "completed"
    assert ok.result is not None and payload_pb2.Payload.FromString(ok.result).data == b"result"
    assert ok.failure is None
    bad = await store.get_outcome(NS, "bad", None)
    assert bad.status == "failed" and bad.result is None
    assert bad.failure is not None
    assert payload_pb2.Failure.FromString(bad.failure).message == "no"
    running_id = await start(store, "open")
    assert (await store.get_outcome(NS, "open", None)) == type(ok)(
        running_id, "running", None, None
    )


async def test_history_pages(store: Store) -> None:
    await start(store)
    for i in range(24):
        await store.signal_workflow(NS, "wf-1", None, "s", payload(b"%d" % i), f"r{i}")
    collected: list[bytes] = []
    after = 0
    pages = 0
    while True:
        page = await store.get_history(NS, "wf-1", None, after, 10)
        pages += 1
        collected.extend(page.events)
        if not page.has_more:
            break
        assert len(page.events) == 10
        after = events(page.events)[-1].event_id
    assert pages == 3
    assert [e.event_id for e in events(collected)] == list(range(1, 26))
    tail = await store.get_history(NS, "wf-1", None, 25, 10)
    assert tail.events == [] and not tail.has_more
    with pytest.raises(InvalidArgumentError):
        await store.get_history(NS, "wf-1", None, 0, 0)
    with pytest.raises(NotFoundError):
        await store.get_history(NS, "nope", None, 0, 10)
    info = (await store.describe(NS, "wf-1", None)).info
    assert info.history_length == 25


async def test_list_runs_filters_and_pages(store: Store) -> None:
    await start(store, "a1", workflow_type="A")
    await start(store, "b1", workflow_type="B")
    await start(store, "a2", workflow_type="A")
    await store.terminate(NS, "a2", None, "x")

    async def ids(**kw: object) -> list[str]:
        args = {
            "status": None,
            "workflow_type": None,
            "started_after_ms": None,
            "started_before_ms": None,
            "limit": 100,
            "cursor": None,
        } | kw
        runs, _ = await store.list_runs(NS, **args)  # type: ignore[arg-type]
        return [r.workflow_id for r in runs]

    assert await ids() == ["a2", "b1", "a1"]  # newest first
    assert await ids(status="running") == ["b1", "a1"]
    assert await ids(status="terminated") == ["a2"]
    assert await ids(workflow_type="A") == ["a2", "a1"]
    assert await ids(workflow_type="A", status="running") == ["a1"]
    starts = {w: (await store.describe(NS, w, None)).info.start_time_ms for w in ("a1", "b1", "a2")}
    b1 = starts["b1"]
    assert await ids(started_after_ms=b1) == [w for w in ("a2", "b1", "a1") if starts[w] >= b1]
    assert await ids(started_before_ms=b1) == [w for w in ("a2", "b1", "a1") if starts[w] < b1]
    assert await ids(started_before_ms=starts["a1"]) == []
    assert await ids(started_after_ms=starts["a1"]) == ["a2", "b1", "a1"]
    with pytest.raises(InvalidArgumentError):
        await store.list_runs(NS, "bogus", None, None, None, 10, None)

    seen: list[str] = []
    cursor: str | None = None
    while True:
        runs, cursor = await store.list_runs(NS, None, None, None, None, 2, cursor)
        seen.extend(r.workflow_id for r in runs)
        if cursor is None:
            break
    assert seen == ["a2", "b1", "a1"]
