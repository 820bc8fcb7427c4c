"""Message streams in workflow code: ``workflow.stream("orders")``.

Reading: ``await workflow.stream("orders").next()`` returns the stream's items one by
one, in offset order. The stream object keeps a cursor and a buffer per name; when the
buffer is empty it emits a ReadStream command (its seq names the read) from the cursor,
and the store records the page it consumed as a StreamRead input event: in the
decision's own transaction when items are there, else in the transaction of the append
that brings one (the run waits durably meanwhile; nothing in the worker holds it). The
next activation resolves the read; a replay gets the same page from history, so the
cursor and the buffer are the same. A page holds at most ``page_size`` items (100) and
about 1 MiB, so a long stream costs each workflow task one page, never the whole stream.

Writing: ``workflow.stream("out").append([...])`` emits an AppendToStream command; the
decision's transaction appends the items (their dedup ids are made of the command's
seq, and replay never sends a recorded command again), so a client reading "out" sees
each item once.

Streams belong to the run: a continue-as-new starts with empty streams (carry the
cursor in the new run's arguments when the input stream is fed again there).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable_rpc import converter
from durable_rpc.v1 import payload_pb2, workflow_task_pb2

if TYPE_CHECKING:
    from durable_rpc.workflow._runtime import WorkflowInstance

#: Items per read (and per append), as the server's limit (MESSAGE_STREAM_MAX_BATCH).
MAX_BATCH = 100


@dataclass(frozen=True)
class StreamItem:
    """One item at its stable zero-based offset."""

    offset: int
    value: Any
    dedup_id: str


@dataclass
class StreamState:
    """A stream's reading position in this run: items read and not consumed yet, and
    the offset of the next read."""

    cursor: int = 0
    buffer: deque[StreamItem] = field(default_factory=deque)
    #: The seq of the read on its way (one at a time: two would read the same items).
    pending: int | None = None
    #: Code waiting for that read's page.
    waiters: list[asyncio.Future[None]] = field(default_factory=list)


@dataclass
class PendingRead:
    stream: str
    state: StreamState
    item_type: Any


def resolve(instance: WorkflowInstance, job: workflow_task_pb2.ResolveStreamReadJob) -> None:
    """The page read ``job.seq`` consumed joins its stream's buffer (whether or not the
    code that asked still waits: the items were consumed in history)."""
    pending = instance._stream_reads.pop(job.seq, None)
    if pending is None:
        raise LookupError(f"stream read resolution for unknown seq {job.seq}")
    state = pending.state
    for item in job.items:
        data = item.payload.data if item.HasField("payload") else b""
        value = converter.decode(data, pending.item_type)
        state.buffer.append(StreamItem(item.offset, value, item.dedup_id))
    state.cursor = job.next_offset
    state.pending = None
    waiters, state.waiters = state.waiters, []
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)


class WorkflowStream:
    """``workflow.stream(name)``: see the module docstring."""

    def __init__(self, instance: WorkflowInstance, name: str, item_type: Any) -> None:
        self._instance = instance
        self.name = name
        self._item_type = item_type
        self._state = instance._streams.setdefault(name, StreamState())

    @property
    def offset(self) -> int:
        """The offset of the next item ``next()`` returns."""
        state = self._state
        return state.buffer[0].offset if state.buffer else state.cursor

    def seek(self, offset: int) -> None:
        """Read from ``offset`` on (e.g. a cursor carried over a continue-as-new);
        forgets the items read and not consumed."""
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"a stream offset is an int >= 0, got {offset!r}")
        if self._state.pending is not None:
            raise RuntimeError(f"stream {self.name!r}: a read is on its way; seek after it")
        self._state.buffer.clear()
        self._state.cursor = offset

    async def next(self) -> Any:
        """The next item's value, waiting durably until one is appended."""
        return (await self.read(1))[0].value

    async def read(
        self, limit: int = MAX_BATCH, *, wait: bool = True, page_size: int = MAX_BATCH
    ) -> list[StreamItem]:
        """Up to ``limit`` items from the cursor (at least one when ``wait``; without
        it, possibly none: what the stream held when the read was recorded)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BATCH:
            raise ValueError(f"limit must be an int in 1..{MAX_BATCH}, got {limit!r}")
        if not 1 <= page_size <= MAX_BATCH:
            raise ValueError(f"page_size must be in 1..{MAX_BATCH}, got {page_size!r}")
        state = self._state
        asked = False
        while not state.buffer:
            if asked and not wait:
                return []
            if state.pending is None:
                self._request(page_size, wait)
                asked = True
            waiter = self._instance.loop.create_future()
            state.waiters.append(waiter)
            await waiter
        taken = min(limit, len(state.buffer))
        return [state.buffer.popleft() for _ in range(taken)]

    def _request(self, page_size: int, wait: bool) -> None:
        instance = self._instance
        seq = instance._take_seq()
        self._state.pending = seq
        instance._stream_reads[seq] = PendingRead(self.name, self._state, self._item_type)
        instance._emit(
            workflow_task_pb2.Command(
                seq=seq,
                read_stream=workflow_task_pb2.ReadStream(
                    stream=self.name, offset=self._state.cursor, limit=page_size, wait=wait
                ),
            )
        )

    def append(self, items: Sequence[Any]) -> None:
        """Append ``items`` (1 to 100) to this run's stream, with the decision."""
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise TypeError("append takes a sequence of items")
        if not 1 <= len(items) <= MAX_BATCH:
            raise ValueError(f"an append holds 1 to {MAX_BATCH} items, got {len(items)}")
        payloads = [payload_pb2.Payload(data=converter.encode(item)) for item in items]
        instance = self._instance
        seq = instance._take_seq()
        instance._emit(
            workflow_task_pb2.Command(
                seq=seq,
                append_to_stream=workflow_task_pb2.AppendToStream(stream=self.name, items=payloads),
            )
        )


def stream(name: str, item_type: Any = Any) -> WorkflowStream:
    """This run's message stream ``name`` (items converted to ``item_type``)."""
    from durable_rpc.workflow._api import current

    if not isinstance(name, str) or not 1 <= len(name) <= 200:
        raise ValueError(f"a stream name is a str of 1 to 200 characters, got {name!r}")
    return WorkflowStream(current(), name, item_type)
