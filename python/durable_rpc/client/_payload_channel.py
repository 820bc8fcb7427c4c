"""Large payloads for the SDK: every unary call's payloads over the inline threshold are
uploaded to the server's payload store (``PayloadService``) and sent as references, and
every reference in a response is downloaded, verified and put back inline, so client,
worker and workflow code only ever see inline payloads (docs/engine.md, "Large payloads").

One channel wrapper rather than code at each call site: workflow inputs and results,
activity inputs and results, signals, updates, queries, child and continue-as-new inputs
all travel in some request or response, and the walker (``_payload_refs``) finds them
whatever the message. The client's payload codec (encryption, compression:
``_payload_codec.py``) is applied here too: a request is encoded before its big payloads
are uploaded, so what the store keeps is what the codec produced (the payload's metadata
stays inline, beside its reference), and a response is decoded after its references
were downloaded.

Costs on the hot path: a request is walked only when its size is over the threshold (a
smaller one cannot hold a payload over it) or a codec is set, a response only when its
bytes hold the mark of a reference or of an encoded payload (C-level searches). Without
a codec nothing is encoded: the frames sent are the plain Avro ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
from google.protobuf.message import Message

from durable_rpc import _payload_refs
from durable_rpc._channel_wrapper import ChannelWrapper
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.client._payload_codec import ENCODED_MARK, MISSING, decode, encoded
from durable_rpc.codec import PayloadCodec
from durable_rpc.errors import PayloadCorruptError, PayloadTooLargeError
from durable_rpc.v1 import payload_pb2, payload_service_pb2, payload_service_pb2_grpc

#: Payload frames above this many bytes are stored by reference (Client.connect's
#: ``payload_inline_threshold``).
DEFAULT_INLINE_THRESHOLD = 128 * 1024
#: At most this many bytes of external payloads are downloaded for one response
#: (Client.connect's ``max_external_payload_bytes`` default).
DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES = _payload_refs.DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES
#: Upload chunk: well under the server's 4 MiB default request limit.
UPLOAD_CHUNK_BYTES = 1024 * 1024

_PAYLOAD_SERVICE = "/durable_rpc.v1.PayloadService/"
# A schedule's input is kept outside history, where no run holds a reference for
# retention: it stays inline (the server refuses a reference there).
_INLINE_ONLY = "/durable_rpc.v1.ScheduleService/"


class PayloadChannel(ChannelWrapper):
    def __init__(
        self,
        channel: grpc.aio.Channel,
        namespace: str,
        *,
        inline_threshold: int = DEFAULT_INLINE_THRESHOLD,
        max_external_payload_bytes: int = DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES,
        codec: PayloadCodec | None = None,
    ) -> None:
        if inline_threshold <= 0 or max_external_payload_bytes <= 0:
            raise ValueError("payload_inline_threshold and max_external_payload_bytes > 0")
        super().__init__(channel)
        self._namespace = namespace
        self.inline_threshold = inline_threshold
        self.max_external_payload_bytes = max_external_payload_bytes
        self.codec = codec
        self._payloads = payload_service_pb2_grpc.PayloadServiceStub(channel)

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method.startswith(_PAYLOAD_SERVICE):
            return self.channel.unary_unary(method, *args, **kwargs)
        inline_only = method.startswith(_INLINE_ONLY)
        deserialize: Callable[[bytes], Any] = kwargs.pop("response_deserializer")

        def marked(raw: bytes) -> tuple[Any, bool, bool]:
            return deserialize(raw), _payload_refs.may_hold_refs(raw), ENCODED_MARK in raw

        inner = self.channel.unary_unary(method, *args, response_deserializer=marked, **kwargs)

        async def call(request: Any, **call_kwargs: Any) -> Any:
            # A raw caller (serialized bytes in and out) gets its bytes through untouched.
            is_message = isinstance(request, Message)
            if is_message and self.codec is not None:
                request = encoded(self.codec, request)  # before any upload: ciphertext
            if is_message and not inline_only and request.ByteSize() > self.inline_threshold:
                request = await self.externalize(request)
            response, marked_refs, marked_encoded = await inner(request, **call_kwargs)
            if is_message and isinstance(response, Message):
                if marked_refs:
                    # A response's payloads are in the namespace its request named.
                    await self.resolve(response, _namespace_of(request, self._namespace))
                if marked_encoded:  # after the downloads: what they fetched is encoded too
                    decode(self.codec or MISSING, response)
            return response

        return call

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        inner = self.channel.unary_stream(method, *args, **kwargs)
        codec = self.codec
        if codec is None or method.startswith(_PAYLOAD_SERVICE):
            return inner

        async def stream(request: Any, **call_kwargs: Any) -> AsyncIterator[Any]:
            async for response in inner(encoded(codec, request), **call_kwargs):
                decode(codec, response)
                yield response

        return stream

    async def externalize(self, request: Message) -> Message:
        """A copy of ``request`` whose payloads over the threshold are uploaded and sent
        as references (the caller's message is left as it was)."""
        copy = type(request)()
        copy.CopyFrom(request)
        namespace = _namespace_of(copy, self._namespace)
        for p in _payload_refs.payloads(copy):
            if len(p.data) > self.inline_threshold:
                ref = await self.upload(namespace, p.data)
                # Only the bytes move: a codec's metadata stays with the reference.
                p.ClearField("data")
                p.external.CopyFrom(ref)
        return copy

    async def upload(self, namespace: str, data: bytes) -> payload_pb2.ExternalPayload:
        """Stores ``data`` (a frame) in chunks; the same bytes stored before are not sent
        again (the server answers complete at the first call)."""
        ref = payload_pb2.ExternalPayload(sha256=hashlib.sha256(data).digest(), size=len(data))
        offset = 0
        try:
            while True:
                answer = await self._payloads.UploadPayload(
                    payload_service_pb2.UploadPayloadRequest(
                        namespace=namespace,
                        payload=ref,
                        offset=offset,
                        data=data[offset : offset + UPLOAD_CHUNK_BYTES],
                    )
                )
                if answer.complete:
                    return ref
                offset = answer.stored_bytes
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def resolve(self, message: Message, namespace: str) -> None:
        """Puts every referenced payload in ``message`` back inline, downloaded once per
        response and verified; refused before any download when they add up to more
        than ``max_external_payload_bytes``."""
        found = [p for p in _payload_refs.payloads(message) if p.HasField("external")]
        unique = {(p.external.sha256, p.external.size) for p in found}
        total = sum(size for _, size in unique)
        cap = self.max_external_payload_bytes
        if total > cap:
            raise PayloadTooLargeError(
                f"the response references {total} bytes of external payloads, over "
                f"max_external_payload_bytes={cap}"
            )
        downloaded: dict[tuple[bytes, int], bytes] = {}
        for key in sorted(unique):
            downloaded[key] = await self.download(namespace, *key)
        for p in found:
            data = downloaded[(p.external.sha256, p.external.size)]
            p.ClearField("external")
            p.data = data

    async def download(self, namespace: str, sha256: bytes, size: int) -> bytes:
        buffer = bytearray()
        digest = hashlib.sha256()
        request = payload_service_pb2.DownloadPayloadRequest(
            namespace=namespace,
            payload=payload_pb2.ExternalPayload(sha256=sha256, size=size),
            max_bytes=self.max_external_payload_bytes,
        )
        try:
            async for chunk in self._payloads.DownloadPayload(request):
                if chunk.offset != len(buffer) or len(buffer) + len(chunk.data) > size:
                    break
                buffer += chunk.data
                digest.update(chunk.data)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        # The server verified what it sent; what arrived is verified here too.
        if len(buffer) != size or digest.digest() != sha256:
            raise PayloadCorruptError(
                f"payload {sha256.hex()} downloaded does not verify ({len(buffer)} bytes of "
                f"{size}, or its SHA-256 differs)"
            )
        return bytes(buffer)


def _namespace_of(message: Message, default: str) -> str:
    """The namespace a request or response names (a CompleteTasks batch: its first item's;
    every item is in one namespace)."""
    fields = message.DESCRIPTOR.fields_by_name
    if "namespace" in fields:
        return getattr(message, "namespace", "") or default
    if "outcomes" in fields:
        for item in message.outcomes:  # type: ignore[attr-defined]
            kind = item.WhichOneof("outcome")
            if kind is not None:
                return getattr(item, kind).namespace or default
    return default
