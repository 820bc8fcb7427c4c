"""Reports task outcomes, coalescing those that pile up while a report is in flight.

At most one CompleteTasks call is in flight per worker: an outcome arriving while idle is
sent at once (no added latency); outcomes arriving meanwhile are sent together in the
next call. Under load this turns N round trips into one, and the server applies the items
of a call together (one group commit). Each item keeps the semantics of its single call:
fencing, idempotence, its own error.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from durable_rpc._rpc_status import error_from_status
from durable_rpc.errors import DurableRpcError
from durable_rpc.v1 import service_pb2
from durable_rpc.worker._client import WorkerClient, call

MAX_OUTCOMES_PER_CALL = 256

_Pending = tuple[service_pb2.TaskOutcome, "asyncio.Future[Any]"]


class OutcomeSender:
    def __init__(self, client: WorkerClient) -> None:
        self._client = client
        self._pending: list[_Pending] = []
        self._sending: asyncio.Task[None] | None = None

    async def send(self, outcome: service_pb2.TaskOutcome) -> Any:
        """The item's response message (e.g. CompleteWorkflowTaskResponse); raises the
        item's DurableRpcError (LeaseLostError, ...) or the call's."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((outcome, future))
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
        request = service_pb2.CompleteTasksRequest(outcomes=[outcome for outcome, _ in batch])
        try:
            response = await call(self._client.worker_service.CompleteTasks, request)
        except DurableRpcError as error:
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        except BaseException as error:  # cancelled: nobody may be left waiting
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            raise
        for (_, future), result in zip(batch, response.results, strict=False):
            if future.done():
                continue
            kind = result.WhichOneof("result")
            if kind == "error":
                future.set_exception(error_from_status(result.error))
            else:
                future.set_result(getattr(result, kind) if kind else None)
        for _, future in batch[len(response.results) :]:
            if not future.done():
                future.set_exception(DurableRpcError("the server answered fewer outcomes"))

    async def close(self) -> None:
        if self._sending is not None:
            with contextlib.suppress(Exception):
                await self._sending
