"""PayloadService: the chunked upload and the streamed download of payloads stored by
SHA-256 (``store/_ops_payloads.py``; the contract in proto/durable_rpc/v1/
payload_service.proto and docs/engine.md, "Large payloads"). Client and worker calls
(``_auth``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from durable_rpc.errors import PayloadTooLargeError
from durable_rpc.server import _validate
from durable_rpc.server._auth import current_principal
from durable_rpc.store import Store
from durable_rpc.v1 import payload_service_pb2 as pb
from durable_rpc.v1 import payload_service_pb2_grpc


def _uploader() -> str:
    """The calling key's id ("" with authentication off: every caller is one uploader)."""
    principal = current_principal.get()
    return "" if principal is None else principal.key_id


class PayloadService(payload_service_pb2_grpc.PayloadServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

    async def UploadPayload(
        self, request: pb.UploadPayloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.UploadPayloadResponse:
        upload = await self._store.upload_payload_chunk(
            _validate.namespace(request.namespace),
            request.payload.sha256,
            request.payload.size,
            request.offset,
            request.data,
            # An unfinished upload is its key's own: no other key can block or poison it.
            _uploader(),
        )
        return pb.UploadPayloadResponse(stored_bytes=upload.stored_bytes, complete=upload.complete)

    async def DownloadPayload(
        self, request: pb.DownloadPayloadRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.DownloadPayloadResponse]:
        ref = request.payload
        if request.max_bytes and ref.size > request.max_bytes:
            raise PayloadTooLargeError(
                f"payload {ref.sha256.hex()} is {ref.size} bytes, over the download cap of "
                f"{request.max_bytes} bytes (max_external_payload_bytes)"
            )
        offset = 0
        # One stored chunk per message: each was one upload request, so each fits one
        # response, and the store reads a few at a time (memory stays bounded).
        async for chunk in self._store.read_payload(
            _validate.namespace(request.namespace), ref.sha256, ref.size
        ):
            yield pb.DownloadPayloadResponse(offset=offset, data=chunk)
            offset += len(chunk)
