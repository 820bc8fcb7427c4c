"""Reports task outcomes, coalescing those that pile up while a report is in flight.

At most one report is in flight per worker: an outcome arriving while idle is sent at
once through its own method (CompleteActivityTask, ...: no added latency, no batch
envelope); outcomes arriving meanwhile are sent together in the next call, a
CompleteTasks batch. Under load this turns N round trips into one, and the server applies
the items of a call together (one group commit). Each item keeps the semantics of its
single call: fencing, idempotence, its own error.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from durable_rpc._rpc_status import error_from_status
from durable_rpc.errors import DurableRpcError
from durable_rpc.v1 import service_pb2
from durable_rpc.worker._client import WorkerClient, call
from durable_rpc.worker._server_link import ServerLink

MAX_OUTCOMES_PER_CALL = 256
# A report waits for the channel to (re)connect rather than failing at once while the
# server is away (wait_for_ready): it then goes out the moment the server is back, ahead
# of the polls that could claim the task's retry. Bounded per call, so a report to an
# unreachable server ends in DEADLINE_EXCEEDED and its retry loop decides what is next.
REPORT_CALL_TIMEOUT_S = 10.0

# An outcome sent alone goes through its own method: no batch envelope to build and parse.
_METHODS = {
    "complete_workflow_task": "CompleteWorkflowTask",
    "fail_workflow_task": "FailWorkflowTask",
    "complete_activity_task": "CompleteActivityTask",
    "fail_activity_task": "FailActivityTask",
}

_Pending = tuple[str, Any, "asyncio.Future[Any]"]


class OutcomeSender:
    def __init__(self, client: WorkerClient, link: ServerLink) -> None:
        self._client = client
        self._link = link
        self._pending: list[_Pending] = []
        self._sending: asyncio.Task[None] | None = None

    async def send(self, kind: str, request: Any) -> Any:
        """Report ``request``, the ``kind`` field of a TaskOutcome
        (``complete_workflow_task``, ...). The item's response message (e.g.
        CompleteWorkflowTaskResponse); raises the item's DurableRpcError
        (LeaseLostError, ...) or the call's."""
        if kind not in _METHODS:
            raise ValueError(f"unknown outcome kind {kind!r}")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((kind, request, future))
        if self._sending is None:
            self._sending = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch = self._pending[:MAX_OUTCOMES_PER_CALL]
                del self._pending[:MAX_OUTCOMES_PER_CALL]
                await self._send_batch(batch)
        finally:
            self._sending = None

    async def _send_batch(self, batch: list[_Pending]) -> None:
        if len(batch) == 1:
            kind, single, future = batch[0]
            method = getattr(self._client.worker_service, _METHODS[kind])
        else:
            single = service_pb2.CompleteTasksRequest(
                outcomes=[service_pb2.TaskOutcome(**{kind: item}) for kind, item, _ in batch]
            )
            method = self._client.worker_service.CompleteTasks
        try:
            response = await call(
                functools.partial(method, wait_for_ready=True, timeout=REPORT_CALL_TIMEOUT_S),
                single,
                self._link,
            )
        except DurableRpcError as error:
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        except BaseException as error:  # cancelled: nobody may be left waiting
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(error)
            raise
        if len(batch) == 1:
            if not future.done():
                future.set_result(response)
            return
        for (_, _, future), result in zip(batch, response.results, strict=False):
            if future.done():
                continue
            kind = result.WhichOneof("result")
            if kind == "error":
                future.set_exception(error_from_status(result.error))
            else:
                future.set_result(getattr(result, kind) if kind else None)
        for _, _, future in batch[len(response.results) :]:
            if not future.done():
                future.set_exception(DurableRpcError("the server answered fewer outcomes"))

    async def close(self) -> None:
        if self._sending is not None:
            with contextlib.suppress(Exception):
                await self._sending
