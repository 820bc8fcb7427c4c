"""A client's payload codec applied to whole messages (docs/engine.md, "Payload codecs").

Every payload a client or worker sends travels in some request, and every payload it
reads in some response: workflow and activity inputs and results, signal, query and
update arguments and results, child and continue-as-new inputs, memo values, heartbeat
and failure details, history events, eager and inline tasks. So the codec is applied by
the client's payload channel (``_payload_channel.py``) to each request and response,
whose payloads the descriptor walker (``_payload_refs``) finds whatever the message: no
call site encodes, and no RPC or event kind is listed by hand.

Left plain on encode: the null frame (it carries nothing, and the server reads it: an
upserted memo key set to null is removed) and an empty payload. A decode failure raises
``PayloadCodecError`` with the undecoded message attached (``error.response``), so a
worker can fail the task it just claimed instead of losing it (worker/_codec_failure.py).
A client without a codec decodes with :data:`MISSING`, which refuses an encoded payload
(PAYLOAD_CODEC_MISSING) rather than hand its ciphertext to code that reads it as a frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf.message import Message

from durable_rpc import _payload_refs, converter
from durable_rpc.codec import ENCODING, PayloadCodec, describe
from durable_rpc.errors import PayloadCodecError, PayloadCodecMissingError
from durable_rpc.v1 import payload_pb2

_NULL_FRAME = converter.encode(None)

#: The bytes a serialized ``Payload.metadata`` entry keyed "encoding" starts with (key:
#: field 1, length 8). Bytes without it hold no encoded payload, so a response is judged
#: by one C-level search; a chance match costs only a walk.
ENCODED_MARK = b"\x0a\x08" + ENCODING.encode()


def encoded(codec: PayloadCodec, request: Any) -> Any:
    """A copy of ``request`` with its payloads encoded (``request`` itself when it holds
    none to encode, or is raw bytes); the caller's message is left as it was, so a retry
    encodes afresh."""
    if not isinstance(request, Message):
        return request
    copy = type(request)()
    copy.CopyFrom(request)
    found = [p for p in _payload_refs.payloads(copy) if _encodable(p)]
    if not found:
        return request
    for target, coded in zip(found, _checked(codec.encode(found), found), strict=True):
        if coded is not target:
            target.CopyFrom(coded)
    return copy


def decode(codec: PayloadCodec, message: Any) -> None:
    """Decodes ``message``'s payloads in place (a response; a history the offline
    Replayer reads); a failure leaves it as it came and names it (``error.response``)."""
    if not isinstance(message, Message):
        return
    found = [p for p in _payload_refs.payloads(message) if p.metadata]
    if not found:
        return
    try:
        decoded = _checked(codec.decode(found), found)
    except PayloadCodecError as error:
        error.response = message
        raise
    for target, plain in zip(found, decoded, strict=True):
        if plain is not target:
            target.CopyFrom(plain)


class _Missing:
    """The codec of a client that has none: nothing to encode, nothing it can decode."""

    def encode(self, payloads: Sequence[payload_pb2.Payload]) -> list[payload_pb2.Payload]:
        return list(payloads)

    def decode(self, payloads: Sequence[payload_pb2.Payload]) -> list[payload_pb2.Payload]:
        for p in payloads:
            shown = describe(p)
            if shown is not None:
                raise PayloadCodecMissingError(
                    f"a payload is encoded ({shown}) and this client has no payload_codec "
                    "(Client.connect(..., payload_codec=...))"
                )
        return list(payloads)


MISSING: PayloadCodec = _Missing()


def _encodable(p: payload_pb2.Payload) -> bool:
    return bool(p.data) and not p.metadata and not p.HasField("external") and p.data != _NULL_FRAME


def _checked(
    out: list[payload_pb2.Payload], given: list[payload_pb2.Payload]
) -> list[payload_pb2.Payload]:
    if len(out) != len(given):
        raise PayloadCodecError(f"the payload codec returned {len(out)} payloads for {len(given)}")
    return out
