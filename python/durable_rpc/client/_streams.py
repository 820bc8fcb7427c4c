"""A run's message streams from a client: ``handle.stream("orders")`` (docs/engine.md,
"Message streams")."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_rpc import converter
from durable_rpc.v1 import payload_pb2, streams_pb2

if TYPE_CHECKING:
    from durable_rpc.client._handle import WorkflowHandle

#: Items per append and per page (the server's limit, MESSAGE_STREAM_MAX_BATCH).
MAX_BATCH = 100
#: How long one long poll of a subscription waits on the server for an item.
SUBSCRIBE_WAIT_S = 30.0


@dataclass(frozen=True)
class StreamAppendResult:
    """The durable outcome of an append: ``first_offset`` is the first item's offset,
    ``offsets`` every item's (a duplicate's: the offset it already had)."""

    first_offset: int
    appended: int
    duplicates: int
    offsets: list[int]


@dataclass(frozen=True)
class StreamItem:
    """One durable item at its stable zero-based offset."""

    offset: int
    value: Any
    dedup_id: str
    append_time: dt.datetime | None


@dataclass(frozen=True)
class StreamPage:
    """One bounded page; read on from ``next_offset``. ``end``: the run is closed and
    nothing lies past ``next_offset`` (the stream will not grow)."""

    items: list[StreamItem]
    next_offset: int
    end: bool


@dataclass(frozen=True)
class StreamDescription:
    stream: str
    #: Items in the stream (the next append's offset).
    length: int
    #: Whether appends are accepted (the run is open).
    open: bool
    last_append_time: dt.datetime | None


class WorkflowStream:
    """The message stream ``name`` of a run (the handle's run, else the workflow id's
    latest)."""

    def __init__(self, handle: WorkflowHandle, name: str, item_type: Any = Any) -> None:
        self.handle = handle
        self.name = name
        self.item_type = item_type

    def _target(self, message: Any) -> Any:
        """``message`` addressed to this stream."""
        message.namespace = self.handle.client.namespace
        message.workflow_id = self.handle.workflow_id
        message.run_id = self.handle.run_id or ""
        message.stream = self.name
        return message

    async def append(
        self, items: Sequence[Any], *, dedup_ids: Sequence[str] | None = None
    ) -> StreamAppendResult:
        """Append ``items`` (1 to 100) in one transaction. An item whose dedup id is in
        the stream already is not appended again (its offset is reported): pass ids of
        your own (e.g. an order id) to make retries from anywhere safe; without them each
        item gets a fresh id, which only this call's own retries keep. Raises
        WorkflowNotRunningError when the run is closed, StreamBatchTooLargeError past
        100 items."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise TypeError("append takes a sequence of items")
        ids = list(dedup_ids) if dedup_ids is not None else [uuid.uuid4().hex for _ in items]
        if len(ids) != len(items):
            raise ValueError(f"{len(items)} items and {len(ids)} dedup ids")
        request = self._target(streams_pb2.AppendStreamRequest())
        request.items.extend(
            [
                streams_pb2.AppendStreamItem(
                    payload=payload_pb2.Payload(data=converter.encode(item)), dedup_id=dedup_id
                )
                for item, dedup_id in zip(items, ids, strict=True)
            ]
        )
        client = self.handle.client
        response = await client.call(client.workflow_service.AppendStream, request)
        return StreamAppendResult(
            first_offset=response.first_offset,
            appended=response.appended,
            duplicates=response.duplicates,
            offsets=list(response.offsets),
        )

    async def read(
        self, offset: int = 0, limit: int = MAX_BATCH, *, wait: float | None = None
    ) -> StreamPage:
        """One page of up to ``limit`` items from ``offset``; a stream nothing was
        appended to gives an empty page. ``wait`` (seconds, at most 60): when no item is
        there yet, wait that long for one."""
        request = self._target(streams_pb2.ReadStreamRequest(offset=offset, limit=limit))
        timeout = None
        if wait is not None:
            request.wait_timeout.FromMilliseconds(int(wait * 1000))
            timeout = wait + 30
        client = self.handle.client
        response = await client.call(client.workflow_service.ReadStream, request, timeout=timeout)
        return StreamPage(
            items=[self._item(item) for item in response.items],
            next_offset=response.next_offset,
            end=response.end,
        )

    async def subscribe(
        self, from_offset: int = 0, *, poll_wait: float = SUBSCRIBE_WAIT_S
    ) -> AsyncIterator[StreamItem]:
        """Every item from ``from_offset`` on, as it is appended: long polls that an
        append wakes, ending when the run is closed and every item was yielded.
        At-least-once: resume from the offset after the last item you processed."""
        offset = from_offset
        while True:
            page = await self.read(offset, wait=poll_wait)
            for item in page.items:
                yield item
            offset = page.next_offset
            if page.end:
                return

    async def describe(self) -> StreamDescription:
        client = self.handle.client
        response = await client.call(
            client.workflow_service.DescribeStream,
            self._target(streams_pb2.DescribeStreamRequest()),
        )
        return StreamDescription(
            stream=response.stream,
            length=response.length,
            open=response.open,
            last_append_time=(
                response.last_append_time.ToDatetime(tzinfo=dt.UTC)
                if response.HasField("last_append_time")
                else None
            ),
        )

    def _item(self, item: streams_pb2.StreamItem) -> StreamItem:
        data = item.payload.data if item.HasField("payload") else b""
        return StreamItem(
            offset=item.offset,
            value=converter.decode(data, self.item_type),
            dedup_id=item.dedup_id,
            append_time=(
                item.append_time.ToDatetime(tzinfo=dt.UTC) if item.HasField("append_time") else None
            ),
        )
