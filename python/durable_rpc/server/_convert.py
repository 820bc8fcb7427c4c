"""Store records -> API messages."""

from __future__ import annotations

from google.protobuf import timestamp_pb2

from durable_rpc.v1 import history_pb2, payload_pb2


def timestamp(ms: int | None) -> timestamp_pb2.Timestamp | None:
    if ms is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def history(events: list[bytes]) -> history_pb2.History:
    """A History from serialized events without parsing each one separately: the wire
    form of a repeated message field is the concatenation of tagged, length-prefixed
    elements."""
    chunks = []
    for event in events:
        chunks.append(b"\x0a")  # field 1, length-delimited
        chunks.append(_varint(len(event)))
        chunks.append(event)
    return history_pb2.History.FromString(b"".join(chunks))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def payload(data: bytes | None) -> payload_pb2.Payload | None:
    return None if data is None else payload_pb2.Payload.FromString(data)


def failure(data: bytes | None) -> payload_pb2.Failure | None:
    return None if data is None else payload_pb2.Failure.FromString(data)
