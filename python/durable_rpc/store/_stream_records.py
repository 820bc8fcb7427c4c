"""What the store returns about a run's message streams (``_streams``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from durable_rpc.v1 import streams_pb2


@dataclass(frozen=True)
class StreamAppend:
    """The durable outcome of an append: every item's offset in request order (a
    duplicate's is the offset its dedup id already had)."""

    run_id: str
    offsets: list[int]
    appended: int
    duplicates: int


@dataclass(frozen=True)
class StreamPage:
    """One bounded page from an offset; reading from ``next_offset`` continues it."""

    run_id: str
    items: list[streams_pb2.StreamItem] = field(default_factory=list)
    next_offset: int = 0
    #: Whether the run is open (appends are accepted, the stream may still grow).
    open: bool = True


@dataclass(frozen=True)
class StreamDescription:
    run_id: str
    stream: str
    #: Items in the stream: the next append's offset.
    length: int
    #: Whether appends are accepted: the run is open.
    open: bool
    #: The database time of the last append (None: nothing appended).
    last_append_ms: int | None
