"""AppendStream, ReadStream, DescribeStream: a run's message streams from clients
(``store/_streams.py``; docs/engine.md, "Message streams"). Client calls (``_auth``: the
namespace's client access, as a signal).

ReadStream with a wait is a long poll: it registers for the run's append notification
(and its close) before it reads, so an append in between is never missed, and answers
the first page that has items, or an empty page when the wait ends. A subscription is
that call repeated from the cursor it returns.
"""

from __future__ import annotations

import grpc

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.server import _validate
from durable_rpc.server._notify import Notifier
from durable_rpc.server._notify import wait as wait_for_wakeup
from durable_rpc.store import Store, StreamPage
from durable_rpc.store._logic import parse_payload
from durable_rpc.v1 import streams_pb2

#: The longest a ReadStream waits for an item.
MAX_STREAM_WAIT_S = 60.0


def _page(page: StreamPage) -> streams_pb2.ReadStreamResponse:
    return streams_pb2.ReadStreamResponse(
        run_id=page.run_id,
        items=page.items,
        next_offset=page.next_offset,
        # Closed and nothing past the cursor: no item will ever come.
        end=not page.open and not page.items,
    )


class WorkflowStreamsMixin:
    _store: Store
    _notifier: Notifier

    async def AppendStream(
        self, request: streams_pb2.AppendStreamRequest, context: grpc.aio.ServicerContext
    ) -> streams_pb2.AppendStreamResponse:
        items = [
            (
                item.dedup_id,
                _validate.payload_bytes(
                    f"items[{i}].payload", item.payload, has=item.HasField("payload")
                ),
            )
            for i, item in enumerate(request.items)
        ]
        result = await self._store.append_stream(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            _validate.name("run_id", request.run_id, required=False) or None,
            request.stream,
            [(dedup_id, parse_payload(data)) for dedup_id, data in items],
        )
        return streams_pb2.AppendStreamResponse(
            run_id=result.run_id,
            first_offset=result.offsets[0],
            appended=result.appended,
            duplicates=result.duplicates,
            offsets=result.offsets,
        )

    async def ReadStream(
        self, request: streams_pb2.ReadStreamRequest, context: grpc.aio.ServicerContext
    ) -> streams_pb2.ReadStreamResponse:
        namespace = _validate.namespace(request.namespace)
        workflow_id = _validate.name("workflow_id", request.workflow_id)
        run_id = _validate.name("run_id", request.run_id, required=False) or None
        wait_s = 0.0
        if request.HasField("wait_timeout"):
            wait_s = request.wait_timeout.ToMilliseconds() / 1000
            if not 0 <= wait_s <= MAX_STREAM_WAIT_S:
                raise InvalidArgumentError(
                    f"wait_timeout must be in [0, {MAX_STREAM_WAIT_S:g}s], got {wait_s:g}s"
                )

        async def read(run: str | None) -> StreamPage:
            return await self._store.read_stream(
                namespace, workflow_id, run, request.stream, request.offset, request.limit
            )

        page = await read(run_id)
        if page.items or not page.open or wait_s <= 0:
            return _page(page)
        key = (namespace, page.run_id)
        # Registered before the read that decides to wait: an append committed in
        # between wakes this call.
        appended = self._notifier.appended_streams.register(key)
        closed = self._notifier.closed_runs.register(key)
        closed.add_done_callback(lambda _: None if appended.done() else appended.set_result(None))
        try:
            page = await read(page.run_id)
            if not page.items and page.open and await wait_for_wakeup(appended, wait_s):
                page = await read(page.run_id)
        finally:
            appended.cancel()
            closed.cancel()
        return _page(page)

    async def DescribeStream(
        self, request: streams_pb2.DescribeStreamRequest, context: grpc.aio.ServicerContext
    ) -> streams_pb2.DescribeStreamResponse:
        description = await self._store.describe_stream(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            _validate.name("run_id", request.run_id, required=False) or None,
            request.stream,
        )
        response = streams_pb2.DescribeStreamResponse(
            run_id=description.run_id,
            stream=description.stream,
            length=description.length,
            open=description.open,
        )
        if description.last_append_ms is not None:
            response.last_append_time.FromMilliseconds(description.last_append_ms)
        return response
