"""Direct dispatch: a start hands its run's first workflow task to a waiting poll, claimed
in the starting transaction. An in-process server on a real SQLite file (or PostgreSQL
database) and socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.server import Server, ServerConfig
from durable_rpc.server._handoff import Handoffs
from durable_rpc.server._notify import Notifier, Waiters
from durable_rpc.server._workflow_service import WorkflowService
from durable_rpc.store import SQLiteStore
from durable_rpc.v1 import service_pb2

pytestmark = pytest.mark.timeout(60)
KEY = ("default", "q", "workflow")


@pytest.fixture
async def server(server_db_url: str) -> AsyncIterator[Server]:
    config = ServerConfig(db_url=server_db_url, listen="127.0.0.1:0", poll_timeout_s=10)
    running = Server(config)
    await running.start()
    yield running
    await running.stop()


@dataclass
class Wired:
    """The pieces of a server's start path, in process, on a real SQLite file."""

    store: SQLiteStore
    notifier: Notifier
    handoffs: Handoffs
    service: WorkflowService


@pytest.fixture
async def wired(tmp_path: Path) -> AsyncIterator[Wired]:
    store = SQLiteStore(str(tmp_path / "wired.db"))
    await store.open()
    try:
        notifier = Notifier(asyncio.get_running_loop(), lambda due_ms: None)
        store.set_listener(notifier)
        handoffs = Handoffs(notifier.tasks, store)
        service = WorkflowService(store, notifier, handoffs=handoffs, workflow_task_lease_ms=30_000)
        yield Wired(store, notifier, handoffs, service)
    finally:
        await store.close()


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def start_request(workflow_id: str, request_id: str) -> service_pb2.StartWorkflowRequest:
    return service_pb2.StartWorkflowRequest(
        namespace="default",
        workflow_id=workflow_id,
        workflow_type="Order",
        task_queue="q",
        request_id=request_id,
    )


def poll_request(worker_id: str) -> service_pb2.PollWorkflowTaskRequest:
    return service_pb2.PollWorkflowTaskRequest(
        namespace="default", task_queue="q", worker_id=worker_id
    )


async def test_a_waiting_poll_gets_the_new_run_without_a_claim_of_its_own(
    server: Server,
) -> None:
    handoffs = server.handoffs
    assert handoffs is not None
    async with await Client.connect(f"127.0.0.1:{server.port}") as client:
        poll = asyncio.ensure_future(client.worker_service.PollWorkflowTask(poll_request("w1")))
        await until(lambda: handoffs.waiting(KEY) == 1, "the poll to wait")
        before = server.store.stats.operations
        started = await client.start_workflow("Order", 7, id="wf-1", task_queue="q")
        task = await poll
        assert (task.run_id, task.fencing_token, task.attempt) == (started.run_id, 1, 1)
        assert [e.WhichOneof("attributes") for e in task.history.events] == ["workflow_started"]
        # One write: the start claimed the task; the poll ran no claim transaction.
        assert server.store.stats.operations - before == 1
        # The lease is an ordinary one: completing under it works.
        done = service_pb2.CompleteWorkflowTaskRequest(
            namespace="default",
            lease=service_pb2.Lease(
                task_id=task.task_id, worker_id="w1", fencing_token=task.fencing_token
            ),
            last_seen_event_id=1,
        )
        await client.worker_service.CompleteWorkflowTask(done)


@pytest.mark.also_on_postgres
async def test_a_duplicate_start_hands_nothing_and_the_poll_keeps_waiting(
    server: Server,
) -> None:
    handoffs = server.handoffs
    assert handoffs is not None
    async with await Client.connect(f"127.0.0.1:{server.port}") as client:
        first = await client.start_workflow("Order", 1, id="wf-1", task_queue="q", request_id="r1")
        claimed = await client.worker_service.PollWorkflowTask(poll_request("w1"))
        assert claimed.run_id == first.run_id
        poll = asyncio.ensure_future(client.worker_service.PollWorkflowTask(poll_request("w2")))
        await until(lambda: handoffs.waiting(KEY) == 1, "the second poll to wait")
        again = await client.start_workflow("Order", 1, id="wf-1", task_queue="q", request_id="r1")
        assert again.run_id == first.run_id
        # Woken without a task, the poll claimed (nothing) and waits again.
        await until(lambda: handoffs.waiting(KEY) == 1, "the poll to wait again")
        assert not poll.done()
        poll.cancel()


async def test_a_task_whose_poll_left_is_released_for_others(wired: Wired) -> None:
    store, notifier, handoffs, service = wired.store, wired.notifier, wired.handoffs, wired.service
    # A poll waiting for w1...
    waiting = notifier.tasks.register(KEY)
    notifier.tasks.name_waiter(KEY, waiting, "w1")
    request = start_request("wf-1", "r1")
    start = asyncio.ensure_future(service.StartWorkflow(request, None))
    await asyncio.sleep(0)  # the start reserved the poll and now waits on the store
    assert handoffs.waiting(KEY) == 0
    waiting.set_result(None)  # ...leaves (its deadline) before the start commits
    started = await start
    # The task went back to the queue: another worker claims it with the next token.
    task = await store.claim_workflow_task("default", "q", "w2", 30_000)
    assert task is not None
    assert (task.run_id, task.worker_id, task.fencing_token) == (started.run_id, "w2", 2)
    assert handoffs.take(waiting) is None


async def test_a_start_whose_caller_went_away_still_hands_its_task_over(wired: Wired) -> None:
    notifier, handoffs, service = wired.notifier, wired.handoffs, wired.service
    waiting = notifier.tasks.register(KEY)
    notifier.tasks.name_waiter(KEY, waiting, "w1")
    start = asyncio.ensure_future(service.StartWorkflow(start_request("wf-1", "r1"), None))
    await asyncio.sleep(0)  # reserved; the start now waits on the store
    start.cancel()  # the caller went away (its RPC was cancelled)
    with pytest.raises(asyncio.CancelledError):
        await start
    # The start itself went on: the reserved poll is woken with its task, claimed
    # for it (token 1), rather than left to wait while the task waits out a lease.
    await asyncio.wait_for(waiting, 10)
    task = handoffs.take(waiting)
    assert task is not None
    assert (task.workflow_id, task.worker_id, task.fencing_token) == ("wf-1", "w1", 1)


async def test_only_named_waiting_polls_can_be_reserved() -> None:
    waiters = Waiters()
    handoffs = Handoffs(waiters, SQLiteStore(":memory:"))  # never released to: unopened
    anonymous = waiters.register(KEY)
    assert handoffs.reserve(KEY) is None
    named = waiters.register(KEY)
    waiters.name_waiter(KEY, named, "w9")
    reservation = handoffs.reserve(KEY)
    assert reservation is not None and reservation.worker_id == "w9"
    # Reserved: out of the wake order, so a notification wakes the other waiter.
    waiters.notify(KEY)
    assert anonymous.done() and not named.done()
    reservation.cancel()
    assert named.done() and handoffs.take(named) is None
