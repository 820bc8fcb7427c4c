"""Builders and waiting helpers for the store tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from durable_rpc.store import ClaimedWorkflowTask, RunOutcome, Store
from durable_rpc.v1 import history_pb2, options_pb2, payload_pb2, workflow_task_pb2

T = TypeVar("T")

NS = "default"
QUEUE = "q1"
WAIT_S = 10.0


def payload(data: bytes) -> bytes:
    return payload_pb2.Payload(data=data).SerializeToString()


def failure(
    message: str = "boom", type_: str = "ValueError", *, non_retryable: bool = False
) -> bytes:
    return payload_pb2.Failure(
        message=message, type=type_, non_retryable=non_retryable
    ).SerializeToString()


def events(raw: list[bytes]) -> list[history_pb2.HistoryEvent]:
    return [history_pb2.HistoryEvent.FromString(e) for e in raw]


def kinds(raw: list[bytes]) -> list[str | None]:
    return [e.WhichOneof("attributes") for e in events(raw)]


def activity_options(
    *,
    start_to_close_ms: int | None = 5_000,
    schedule_to_close_ms: int | None = None,
    heartbeat_ms: int | None = None,
    initial_ms: int | None = 10,
    maximum_attempts: int = 0,
    non_retryable: tuple[str, ...] = (),
    non_idempotent: bool = False,
) -> options_pb2.ActivityOptions:
    options = options_pb2.ActivityOptions(non_idempotent=non_idempotent)
    if start_to_close_ms is not None:
        options.start_to_close_timeout.FromMilliseconds(start_to_close_ms)
    if schedule_to_close_ms is not None:
        options.schedule_to_close_timeout.FromMilliseconds(schedule_to_close_ms)
    if heartbeat_ms is not None:
        options.heartbeat_timeout.FromMilliseconds(heartbeat_ms)
    if initial_ms is not None:
        options.retry_policy.initial_interval.FromMilliseconds(initial_ms)
        options.retry_policy.maximum_interval.FromMilliseconds(initial_ms * 4)
    options.retry_policy.maximum_attempts = maximum_attempts
    options.retry_policy.non_retryable_error_types.extend(non_retryable)
    return options


def schedule(
    seq: int,
    activity_type: str = "act",
    options: options_pb2.ActivityOptions | None = None,
    *,
    data: bytes = b"in",
    task_queue: str = "",
) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        schedule_activity=workflow_task_pb2.ScheduleActivity(
            activity_type=activity_type,
            input=payload_pb2.Payload(data=data),
            task_queue=task_queue,
            options=options if options is not None else activity_options(),
        ),
    )


def timer(seq: int, ms: int) -> workflow_task_pb2.Command:
    command = workflow_task_pb2.Command(seq=seq, start_timer=workflow_task_pb2.StartTimer())
    command.start_timer.duration.FromMilliseconds(ms)
    return command


def cancel_timer(seq: int, timer_seq: int) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq, cancel_timer=workflow_task_pb2.CancelTimer(timer_seq=timer_seq)
    )


def complete(seq: int, data: bytes = b"done") -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(result=payload_pb2.Payload(data=data)),
    )


def fail_workflow(seq: int, message: str = "bad") -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        fail_workflow=workflow_task_pb2.FailWorkflow(
            failure=payload_pb2.Failure(message=message, type="AppError")
        ),
    )


def cancel_workflow(seq: int) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(seq=seq, cancel_workflow=workflow_task_pb2.CancelWorkflow())


async def start(
    store: Store,
    workflow_id: str = "wf-1",
    *,
    workflow_type: str = "Order",
    request_id: str | None = None,
    queue: str = QUEUE,
) -> str:
    result = await store.start_workflow(
        NS,
        workflow_id,
        workflow_type,
        "1",
        queue,
        payload(b"args"),
        request_id if request_id is not None else f"req-{workflow_id}",
    )
    return result.run_id


async def claim(store: Store, worker: str = "w1", lease_ms: int = 30_000) -> ClaimedWorkflowTask:
    task = await store.claim_workflow_task(NS, QUEUE, worker, lease_ms)
    assert task is not None, "expected a workflow task"
    return task


async def history(
    store: Store, workflow_id: str = "wf-1", run_id: str | None = None
) -> list[bytes]:
    page = await store.get_history(NS, workflow_id, run_id, 0, 10_000)
    assert not page.has_more
    return page.events


async def eventually(
    fn: Callable[[], Awaitable[T | None]], *, timeout: float = WAIT_S, what: str = "condition"
) -> T:
    """Calls ``fn`` until it returns something other than None/False (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await fn()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def wait_db_time(store: Store, target_ms: int) -> int:
    """Waits until the database clock reaches ``target_ms``; returns the clock then."""

    async def reached() -> int | None:
        now = await store.now_ms()
        return now if now >= target_ms else None

    return await eventually(reached, what=f"database time {target_ms}")


class RecordingListener:
    """A StoreListener that records every notification."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, str, str]] = []
        self.due: list[int] = []
        self.closed: list[tuple[str, str]] = []
        self.outcomes: list[RunOutcome | None] = []
        self.answered: list[tuple[str, str]] = []
        self.updates: list[tuple[str, str]] = []
        self.streams: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    def tasks_available(self, namespace: str, task_queue: str, kind: str) -> None:
        self.tasks.append((namespace, task_queue, kind))
        self.changed.set()

    def due_at(self, due_ms: int) -> None:
        self.due.append(due_ms)
        self.changed.set()

    def run_closed(self, namespace: str, run_id: str, outcome: RunOutcome | None = None) -> None:
        self.closed.append((namespace, run_id))
        self.outcomes.append(outcome)
        self.changed.set()

    def query_answered(self, namespace: str, query_id: str) -> None:
        self.answered.append((namespace, query_id))
        self.changed.set()

    def update_changed(self, namespace: str, update_id: str) -> None:
        self.updates.append((namespace, update_id))
        self.changed.set()

    def stream_appended(self, namespace: str, run_id: str) -> None:
        self.streams.append((namespace, run_id))
        self.changed.set()

    async def wait_for(self, predicate: Callable[[], bool], what: str) -> None:
        async with asyncio.timeout(WAIT_S):
            while not predicate():
                self.changed.clear()
                if predicate():
                    return
                try:
                    await asyncio.wait_for(self.changed.wait(), timeout=WAIT_S)
                except TimeoutError:
                    raise AssertionError(f"listener never saw {what}") from None
