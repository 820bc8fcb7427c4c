"""Payloads a codec encoded, as the CLI shows them (docs/engine.md, "Payload codecs").

The CLI holds no keys. What needs none is undone (compression); what does is shown as
``<encrypted: key k1>`` instead of failing to decode (``durable_rpc.codec.undo_keyless``,
shared with the web UI): directly for the history views,
which render payloads themselves (reading them ``AsStored``, so an export keeps the
ciphertext a holder of the key can replay), and ``ShownCodec`` for the commands that read
values through the SDK (result, describe's memo, query, update), which it replaces with
that text as a plain string frame.
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_rpc import converter
from durable_rpc.codec import undo_keyless
from durable_rpc.v1.payload_pb2 import Payload


class ShownCodec:
    """Sends payloads as they are; receives each encoded one as its ``undo_keyless`` form."""

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for p in payloads:
            shown = undo_keyless(p)
            out.append(Payload(data=converter.encode(shown)) if isinstance(shown, str) else shown)
        return out


class AsStored:
    """Payloads as the server keeps them, encoded ones included."""

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)
