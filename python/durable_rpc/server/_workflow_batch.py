"""BatchWorkflows: cancel, terminate or signal every open run a list query matches.

The runs are read page by page in the order of ListWorkflows (newest first) with its
cursor, the row id: a run closing or starting while the batch runs cannot shift a page,
so none is skipped or visited twice (runs started after the first page are not part of
the batch). Each run gets the store operation its single call uses, on that exact run
id; a closed run is skipped. A signal's request id is made of the batch id and the run
id, so re-running a batch delivers nothing twice; a cancellation already requested is
not requested again. One run's error is counted (with the last message), never fatal.

Actions are paced on the monotonic clock at ``max_per_second``; progress is streamed
after every page and at least every second, and the last message has ``done`` set.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import grpc

from durable_rpc.errors import (
    DurableRpcError,
    InvalidArgumentError,
    NotFoundError,
    WorkflowNotRunningError,
)
from durable_rpc.server import _validate
from durable_rpc.server._admin_service import actor
from durable_rpc.store import RunInfo, Store
from durable_rpc.v1 import service_pb2

log = logging.getLogger("durable_rpc.server.admin")

DEFAULT_PER_SECOND = 50
MAX_PER_SECOND = 1000
#: Runs read per page of the query.
PAGE_SIZE = 100
#: Longest a caller waits between two progress messages while runs are being acted on.
PROGRESS_EVERY_S = 1.0

#: Acts on one run; True when it changed something, False when there was nothing to do.
Action = Callable[[RunInfo], Awaitable[bool]]


class Pacer:
    """At most ``per_second`` starts per second, measured on the monotonic clock: the
    n-th start of a burst waits until ``(n - 1) / per_second`` after the first."""

    def __init__(self, per_second: int) -> None:
        self._interval = 1.0 / per_second
        self._next = 0.0

    async def wait(self) -> None:
        now = time.monotonic()
        if self._next > now:
            await asyncio.sleep(self._next - now)
        self._next = max(self._next, now) + self._interval


@dataclass
class _Counts:
    matched: int = 0
    applied: int = 0
    skipped: int = 0
    failed: int = 0
    last_error: str = ""

    def message(self, done: bool = False) -> service_pb2.BatchWorkflowsProgress:
        return service_pb2.BatchWorkflowsProgress(
            matched=self.matched,
            applied=self.applied,
            skipped=self.skipped,
            failed=self.failed,
            last_error=self.last_error,
            done=done,
        )


def _per_second(value: int) -> int:
    if value == 0:
        return DEFAULT_PER_SECOND
    if not 0 < value <= MAX_PER_SECOND:
        raise InvalidArgumentError(
            f"max_per_second must be in 1..{MAX_PER_SECOND} (0: the default, "
            f"{DEFAULT_PER_SECOND}), got {value}"
        )
    return value


class WorkflowBatchMixin:
    """WorkflowService.BatchWorkflows (a server stream)."""

    _store: Store

    def _batch_action(self, namespace: str, request: service_pb2.BatchWorkflowsRequest) -> Action:
        store = self._store
        kind = request.WhichOneof("action")
        cleanup_timeout_ms = _validate.cleanup_timeout_ms(request)
        if cleanup_timeout_ms is not None and kind != "cancel_reason":
            raise InvalidArgumentError("cleanup_timeout applies to a batch cancel only")
        if kind == "cancel_reason":
            reason = request.cancel_reason

            async def cancel(run: RunInfo) -> bool:
                return await store.request_cancel(
                    namespace, run.workflow_id, run.run_id, reason, cleanup_timeout_ms
                )

            return cancel
        if kind == "terminate_reason":
            reason = request.terminate_reason

            async def terminate(run: RunInfo) -> bool:
                await store.terminate(namespace, run.workflow_id, run.run_id, reason)
                return True

            return terminate
        if kind == "signal":
            name = _validate.name("signal.signal_name", request.signal.signal_name)
            data = _validate.payload_bytes(
                "signal.input", request.signal.input, has=request.signal.HasField("input")
            )
            batch_id = request.batch_id

            async def signal(run: RunInfo) -> bool:
                return await store.signal_workflow(
                    namespace,
                    run.workflow_id,
                    run.run_id,
                    name,
                    data,
                    f"batch:{batch_id}:{run.run_id}",
                )

            return signal
        raise InvalidArgumentError(
            "an action is required: cancel_reason, terminate_reason or signal"
        )

    async def BatchWorkflows(
        self, request: service_pb2.BatchWorkflowsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[service_pb2.BatchWorkflowsProgress]:
        namespace = _validate.namespace(request.namespace)
        if not request.query.strip():
            raise InvalidArgumentError(
                "query is required (a batch never applies to every run by accident)"
            )
        _validate.name("batch_id", request.batch_id)
        pacer = Pacer(_per_second(request.max_per_second))
        act = self._batch_action(namespace, request)
        # The first page also checks the query: a malformed one fails the call before
        # anything was done (INVALID_ARGUMENT with the parser's reason).
        runs, cursor = await self._store.list_runs(
            namespace, None, None, None, None, PAGE_SIZE, None, request.query
        )
        log.info(
            "batch %r in %r: %s of the runs matching %r, by %s",
            request.batch_id,
            namespace,
            request.WhichOneof("action"),
            request.query,
            actor(),
        )
        counts = _Counts()
        last_sent = time.monotonic()
        while True:
            for run in runs:
                counts.matched += 1
                if run.status != "running":
                    counts.skipped += 1
                    continue
                await pacer.wait()
                await _apply(act, run, counts)
                if time.monotonic() - last_sent >= PROGRESS_EVERY_S:
                    yield counts.message()
                    last_sent = time.monotonic()
            if cursor is None:
                break
            yield counts.message()
            last_sent = time.monotonic()
            runs, cursor = await self._store.list_runs(
                namespace, None, None, None, None, PAGE_SIZE, cursor, request.query
            )
        log.info(
            "batch %r in %r done: %d matched, %d applied, %d skipped, %d failed",
            request.batch_id,
            namespace,
            counts.matched,
            counts.applied,
            counts.skipped,
            counts.failed,
        )
        yield counts.message(done=True)


async def _apply(act: Action, run: RunInfo, counts: _Counts) -> None:
    try:
        changed = await act(run)
    except (WorkflowNotRunningError, NotFoundError):
        # Closed (or deleted by retention) since the page was read: nothing to do.
        changed = False
    except DurableRpcError as exc:
        counts.failed += 1
        counts.last_error = f"{run.workflow_id} ({run.run_id}): {exc.reason}: {exc}"
        return
    if changed:
        counts.applied += 1
    else:
        counts.skipped += 1
