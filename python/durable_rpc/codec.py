"""Payload codecs: encryption and compression of payloads before they leave the SDK.

A codec turns the payloads a client or worker sends into other payloads and back on
receipt (docs/engine.md, "Payload codecs"). It is given to ``Client.connect(...,
payload_codec=...)``; every call of that client, and of a worker built on it, passes its
payloads through it in the client's payload channel (``client/_payload_codec.py``), so
the server stores only what the codec produced and never needs its keys.

Each codec wraps a whole payload: the inner ``Payload`` message (its Avro frame and any
metadata an earlier codec set) is serialized, transformed, and carried as the ``data`` of
a new payload whose ``metadata["encoding"]`` names the transformation. Decoding undoes
only the encodings it knows and passes every other payload through unchanged, so
histories written before a codec was enabled keep working and codecs chain:
``CompositeCodec([CompressionCodec(), AesGcmCodec(...)])`` compresses, then encrypts.

Codecs are synchronous: the built-in ones are local CPU work (AES-GCM, zlib), and the
offline ``Replayer`` and the CLI use them outside any event loop.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Mapping, Sequence
from typing import Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from google.protobuf.message import DecodeError

from durable_rpc.errors import (
    PayloadCodecError,
    PayloadDecryptFailedError,
    PayloadKeyUnknownError,
)
from durable_rpc.v1.payload_pb2 import Payload

__all__ = [
    "ENCODING",
    "ENCODING_ENCRYPTED",
    "ENCODING_ZLIB",
    "KEY_ID",
    "AesGcmCodec",
    "CompositeCodec",
    "CompressionCodec",
    "PayloadCodec",
    "describe",
    "readable",
]

#: The metadata key naming what a codec did to a payload.
ENCODING = "encoding"
ENCODING_ENCRYPTED = "binary/encrypted"
ENCODING_ZLIB = "binary/zlib"
#: The metadata key naming the key an encrypted payload was sealed with.
KEY_ID = "encryption-key-id"
CIPHER = "encryption-cipher"
AES_256_GCM = "AES-256-GCM"

_NONCE_BYTES = 12  # 96 bits: GCM's native nonce size
_TAG_BYTES = 16
_KEY_BYTES = 32


class PayloadCodec(Protocol):
    """Turns payloads into payloads; both methods return one payload per input, in order.

    ``decode`` must pass a payload whose metadata it does not recognize through unchanged
    (plain Avro frames above all), and raise ``PayloadCodecError`` (or a subclass with a
    more precise reason) for one it recognizes but cannot undo."""

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]: ...

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]: ...


class CompositeCodec:
    """Applies ``codecs`` in order on encode and in reverse order on decode."""

    def __init__(self, codecs: Sequence[PayloadCodec]) -> None:
        self.codecs = tuple(codecs)

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in self.codecs:
            out = codec.encode(out)
        return out

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for codec in reversed(self.codecs):
            out = codec.decode(out)
        return out


class CompressionCodec:
    """zlib-compresses payloads of at least ``min_bytes`` bytes; one that would not
    shrink is sent as it was (metadata ``encoding: binary/zlib``)."""

    def __init__(self, *, min_bytes: int = 1024, level: int = 6) -> None:
        if min_bytes < 0:
            raise ValueError("min_bytes must not be negative")
        if not 0 <= level <= 9:
            raise ValueError("level must be in 0..9 (zlib)")
        self.min_bytes = min_bytes
        self.level = level

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._encode_one(p) for p in payloads]

    def _encode_one(self, payload: Payload) -> Payload:
        inner = payload.SerializeToString()
        if len(inner) < self.min_bytes:
            return payload
        packed = zlib.compress(inner, self.level)
        out = Payload(data=packed, metadata={ENCODING: ENCODING_ZLIB})
        # The metadata costs bytes too: only what really shrinks is sent compressed.
        return out if out.ByteSize() < payload.ByteSize() else payload

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decode_one(p) for p in payloads]

    def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get(ENCODING) != ENCODING_ZLIB:
            return payload
        try:
            return Payload.FromString(zlib.decompress(payload.data))
        except (zlib.error, DecodeError) as exc:
            raise PayloadCodecError(
                f"a {ENCODING_ZLIB} payload does not decompress: {exc}"
            ) from None


class AesGcmCodec:
    """AES-256-GCM encryption at rest, with key ids for rotation.

    ``keys`` maps key ids to 32-byte keys; new payloads are sealed with
    ``encrypt_with``, and any key id in ``keys`` still decodes, so rotating is adding the
    new key, pointing ``encrypt_with`` at it and keeping the old ones while histories
    sealed with them are read. Each payload gets a random 96-bit nonce (``data`` is nonce
    ‖ ciphertext ‖ tag); the metadata (encoding, cipher, key id) is the associated data,
    so changing it makes the payload fail to decrypt rather than be misread."""

    def __init__(self, *, keys: Mapping[str, bytes], encrypt_with: str) -> None:
        if not keys:
            raise ValueError("AesGcmCodec needs at least one key")
        for key_id, key in keys.items():
            if not key_id or not key_id.isprintable():
                raise ValueError("key ids must be non-empty printable strings")
            if not isinstance(key, bytes) or len(key) != _KEY_BYTES:
                raise ValueError(f"key {key_id!r} must be {_KEY_BYTES} bytes (AES-256)")
        if encrypt_with not in keys:
            raise ValueError(f"encrypt_with={encrypt_with!r} is not one of the key ids")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self.encrypt_with = encrypt_with

    @property
    def key_ids(self) -> frozenset[str]:
        """The key ids this codec decrypts."""
        return frozenset(self._ciphers)

    def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        cipher = self._ciphers[self.encrypt_with]
        metadata = {ENCODING: ENCODING_ENCRYPTED, CIPHER: AES_256_GCM, KEY_ID: self.encrypt_with}
        aad = _associated_data(metadata)
        out = []
        for payload in payloads:
            nonce = os.urandom(_NONCE_BYTES)
            sealed = cipher.encrypt(nonce, payload.SerializeToString(), aad)
            out.append(Payload(data=nonce + sealed, metadata=metadata))
        return out

    def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decode_one(p) for p in payloads]

    def _decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get(ENCODING) != ENCODING_ENCRYPTED:
            return payload
        key_id = payload.metadata.get(KEY_ID, "")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            known = ", ".join(sorted(self._ciphers))
            raise PayloadKeyUnknownError(
                f"a payload is encrypted with key id {key_id!r}, which this codec does not "
                f"hold (it holds: {known})"
            )
        if payload.metadata.get(CIPHER, AES_256_GCM) != AES_256_GCM:
            raise PayloadCodecError(f"cipher {payload.metadata[CIPHER]!r} is not {AES_256_GCM}")
        data = payload.data
        if len(data) < _NONCE_BYTES + _TAG_BYTES:
            raise PayloadDecryptFailedError(f"an encrypted payload of {len(data)} bytes is cut")
        try:
            inner = cipher.decrypt(
                data[:_NONCE_BYTES], data[_NONCE_BYTES:], _associated_data(payload.metadata)
            )
        except InvalidTag:
            raise PayloadDecryptFailedError(
                f"a payload encrypted with key id {key_id!r} does not authenticate (a "
                "different key under that id, or its bytes or metadata were changed)"
            ) from None
        try:
            return Payload.FromString(inner)
        except DecodeError as exc:  # authenticated, so only a foreign writer's bug
            raise PayloadCodecError(f"a decrypted payload is no Payload message: {exc}") from None


def _associated_data(metadata: Mapping[str, str]) -> bytes:
    """The metadata in one canonical byte form (sorted keys), bound to the ciphertext."""
    return json.dumps(sorted(metadata.items()), separators=(",", ":")).encode()


def describe(payload: Payload) -> str | None:
    """How a payload's codec encoding reads to a human, when the reader cannot decode it
    (the CLI): ``<encrypted: key k1>``, ``<encoded: binary/zlib>``; None for a plain one."""
    encoding = payload.metadata.get(ENCODING)
    if encoding is None:
        return None
    if encoding == ENCODING_ENCRYPTED:
        return f"<encrypted: key {payload.metadata.get(KEY_ID, '?')}>"
    return f"<encoded: {encoding}>"


#: The most a reader inflates one compressed payload to: a small payload of a few KiB
#: can inflate a thousandfold, and a viewer must not be made to hold that.
READABLE_INFLATE_LIMIT = 64 * 1024 * 1024


def readable(
    payload: Payload,
    *,
    decrypt: AesGcmCodec | None = None,
    limit: int = READABLE_INFLATE_LIMIT,
) -> Payload | str:
    """``payload`` with every encoding undone that needs no key (compression) or a key
    ``decrypt`` holds, for a viewer (the CLI, the web UI); or, where that stops, text
    saying why: ``describe``'s ``<encrypted: key k1>`` for a key not held,
    ``<undecryptable: key k1>`` for one held that does not authenticate it,
    ``<undecodable: binary/zlib>`` for one that does not decompress, ``<compressed:
    over N bytes>`` for one that would inflate past ``limit``. Never raises."""
    while payload.metadata:
        encoding = payload.metadata.get(ENCODING)
        key_id = payload.metadata.get(KEY_ID, "")
        if encoding == ENCODING_ENCRYPTED and decrypt is not None and key_id in decrypt.key_ids:
            try:
                payload = decrypt.decode([payload])[0]
            except PayloadCodecError:
                return f"<undecryptable: key {key_id}>"
            continue
        if encoding != ENCODING_ZLIB:
            return describe(payload) or "<encoded>"
        inflater = zlib.decompressobj()
        try:
            inner = inflater.decompress(payload.data, limit)
            if inflater.unconsumed_tail:
                return f"<compressed: over {limit} bytes>"
            payload = Payload.FromString(inner + inflater.flush())
        except (zlib.error, DecodeError):
            return f"<undecodable: {ENCODING_ZLIB}>"
    return payload
