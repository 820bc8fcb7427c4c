"""The one place where requests are parsed and domain errors become gRPC statuses.

Handlers receive parsed requests and raise domain errors; this interceptor
- parses the raw request bytes itself, so garbage protobuf gets INVALID_ARGUMENT with a
  reason instead of grpc's bare INTERNAL "Exception deserializing request";
- refuses requests over the size limit with RESOURCE_EXHAUSTED;
- maps every DurableRpcError through the one status table, payload codec errors to
  INVALID_PAYLOAD, and anything unexpected to INTERNAL (logged with its stack).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from durable_rpc._rpc_status import to_status
from durable_rpc.errors import (
    DurableRpcError,
    InternalError,
    InvalidArgumentError,
    InvalidPayloadError,
    ResourceExhaustedError,
)
from durable_rpc.payload import PayloadError

log = logging.getLogger(__name__)

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, max_request_bytes: int) -> None:
        self._max_request_bytes = max_request_bytes
        # Wrapped handlers by method: built once, not on every call (this is a hot path).
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        wrapped = self._wrapped.get(details.method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None or handler.request_deserializer is None:
            return handler
        wrapped = grpc.unary_unary_rpc_method_handler(
            self._wrap(handler.unary_unary, handler.request_deserializer),
            request_deserializer=None,  # raw bytes: parsed below, with a clear error
            response_serializer=handler.response_serializer,
        )
        self._wrapped[details.method] = wrapped
        return wrapped

    def _wrap(self, inner: Handler, parse: Callable[[bytes], Any]) -> Handler:
        limit = self._max_request_bytes

        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                if len(raw) > limit:
                    raise ResourceExhaustedError(
                        f"request of {len(raw)} bytes is over the {limit}-byte limit"
                    )
                try:
                    request = parse(raw)
                except (DecodeError, ValueError) as exc:
                    raise InvalidArgumentError(f"malformed request message: {exc}") from exc
                return await inner(request, context)
            except DurableRpcError as exc:
                await context.abort_with_status(to_status(exc))
            except PayloadError as exc:
                await context.abort_with_status(to_status(InvalidPayloadError(str(exc))))
            except Exception as exc:
                if isinstance(exc, grpc.aio.AbortError):
                    raise
                log.exception("unexpected error in %s", getattr(inner, "__name__", inner))
                await context.abort_with_status(to_status(InternalError(repr(exc))))

        return handle
