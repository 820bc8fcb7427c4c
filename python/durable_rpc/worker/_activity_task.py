"""One activity attempt: decode, run the user function, watch the lease, report."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Literal

from durable_rpc import converter, payload
from durable_rpc.activity._context import (
    ActivityContext,
    ActivityInfo,
    SessionViews,
    set_context,
)
from durable_rpc.activity._definition import ActivityDefinition
from durable_rpc.activity._failure import failure_from_exception
from durable_rpc.sessions import WorkerSession
from durable_rpc.v1 import payload_pb2, service_pb2
from durable_rpc.worker._lease_keeper import HeldLease, LeaseKeeper, lease_window_ms

log = logging.getLogger("durable_rpc.worker")


@dataclass(frozen=True)
class AttemptOutcome:
    """``completed`` (with the encoded result), ``failed`` (with the Failure) or
    ``lease_lost``: another owner may hold the task now, so report nothing."""

    kind: Literal["completed", "failed", "lease_lost"]
    result: bytes = b""
    failure: payload_pb2.Failure | None = None


def _failed(error: BaseException, *, non_retryable: bool = False) -> AttemptOutcome:
    failure = failure_from_exception(error)
    failure.non_retryable = failure.non_retryable or non_retryable
    return AttemptOutcome("failed", failure=failure)


class _Attempt:
    """The fate of one attempt as decided from outside the user code."""

    def __init__(self, context: ActivityContext) -> None:
        self.context = context
        self.lease_lost = False
        self.cancel_requested = False
        self.task: asyncio.Task[Any] | None = None

    def lose(self) -> None:
        self.lease_lost = True
        self._stop()

    def request_cancel(self) -> None:
        self.cancel_requested = True
        self.context.cancel_requested = True
        self._stop()

    def _stop(self) -> None:
        # Sync activities see this through activity.is_cancelled(); async ones get a
        # CancelledError at their current await.
        self.context.cancelled.set()
        if self.task is not None:
            self.task.cancel()


def info_of(task: service_pb2.PollActivityTaskResponse, task_queue: str) -> ActivityInfo:
    details: list[Any] = []
    if task.heartbeat_details.data:
        decoded = payload.decode(task.heartbeat_details.data)
        details = decoded if isinstance(decoded, list) else [decoded]
    return ActivityInfo(
        task_id=task.task_id,
        attempt=task.attempt,
        fencing_token=task.fencing_token,
        workflow_id=task.workflow_id,
        run_id=task.run_id,
        activity_type=task.activity_type,
        seq=task.seq,
        task_queue=task_queue,
        heartbeat_details=tuple(details),
        session=WorkerSession.from_proto(task.session) if task.HasField("session") else None,
    )


async def _invoke(
    definition: ActivityDefinition,
    args: list[Any],
    context: ActivityContext,
    executor: Executor | None,
) -> Any:
    set_context(context)
    if definition.is_async:
        return await definition.fn(*args)
    # The copied context carries the activity context into the pool thread.
    run: Callable[[], Any] = functools.partial(contextvars.copy_context().run, definition.fn, *args)
    return await asyncio.get_running_loop().run_in_executor(executor, run)


def _heartbeat_cap_ms(task: service_pb2.PollActivityTaskResponse) -> int | None:
    if task.HasField("heartbeat_timeout") and task.heartbeat_timeout.ToMilliseconds() > 0:
        return task.heartbeat_timeout.ToMilliseconds()
    return None


async def run_attempt(
    definition: ActivityDefinition,
    task: service_pb2.PollActivityTaskResponse,
    lease: service_pb2.Lease,
    *,
    task_queue: str,
    keeper: LeaseKeeper,
    executor: Executor | None,
    sessions: SessionViews | None = None,
) -> AttemptOutcome:
    """Run the attempt under the keeper's watch and say how it ended (``sessions``: the
    worker's views of the sessions it holds, which a session attempt reads)."""
    context = ActivityContext(info_of(task, task_queue), sessions)
    attempt = _Attempt(context)
    try:
        args = converter.decode_args(task.input.data, definition.arg_hints)
    except payload.PayloadError as error:
        # The input can never decode on any retry: fail for good.
        return _failed(error, non_retryable=True)
    cap_ms = _heartbeat_cap_ms(task)
    held = HeldLease(lease, cap_ms, context, attempt.lose, attempt.request_cancel)
    expires = task.lease_expires_at if task.HasField("lease_expires_at") else None
    keeper.hold(held, lease_window_ms(expires, cap_ms))
    user = asyncio.ensure_future(_invoke(definition, args, context, executor))
    attempt.task = user
    try:
        await asyncio.wait({user})
        if not attempt.lease_lost and not user.cancelled() and user.exception() is not None:
            await keeper.flush(held)
    except asyncio.CancelledError:
        # The worker itself is being torn down: abandon the attempt; its lease lapses.
        user.cancel()
        raise
    finally:
        keeper.release(lease.task_id, lease.fencing_token)
    if attempt.lease_lost and (user.cancelled() or user.exception() is not None):
        # Stopped by the loss. One that had already returned keeps its result: the
        # server judges the report, and a retry this worker claimed can still use it.
        return AttemptOutcome("lease_lost")
    if user.cancelled():
        cancelled = asyncio.CancelledError("the activity was cancelled")
        return _failed(cancelled, non_retryable=attempt.cancel_requested)
    exception = user.exception()
    if exception is not None:
        return _failed(exception)
    try:
        return AttemptOutcome("completed", result=converter.encode(user.result()))
    except payload.PayloadError as error:
        return _failed(error, non_retryable=True)
