"""The one place where requests are parsed and domain errors become gRPC statuses.

Handlers receive parsed requests and raise domain errors; this interceptor
- parses the raw request bytes itself, so garbage protobuf gets INVALID_ARGUMENT with a
  reason instead of grpc's bare INTERNAL "Exception deserializing request";
- refuses requests over the size limit with RESOURCE_EXHAUSTED;
- checks every parsed request against the rules of its message descriptor
  (``_validate_message``) before the handler sees it, so malformed input of any RPC is
  INVALID_ARGUMENT and an oversized identifier is refused before anything echoes it;
- maps every DurableRpcError through the one status table, payload codec errors to
  INVALID_PAYLOAD, and anything unexpected to INTERNAL (logged with its stack, answered
  with an incident id only: the exception's text may hold server paths or data);
- tells ``on_store_unavailable`` (the health monitor) when the store failed a call.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
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
    StoreUnavailableError,
    UnimplementedError,
)
from durable_rpc.payload import PayloadError
from durable_rpc.server._auth import (
    Authenticator,
    authorize_request,
    caller,
    current_principal,
    guard_stream,
    is_open,
)
from durable_rpc.server._validate_message import check_request

log = logging.getLogger(__name__)

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


def internal_error(exc: BaseException, where: str) -> InternalError:
    """Logs an unexpected exception with an incident id; the error for the client names
    only the id."""
    incident = uuid.uuid4().hex[:12]
    log.error("unexpected error in %s (incident %s)", where, incident, exc_info=exc)
    return InternalError(f"unexpected server error (incident {incident}, see the server log)")


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(
        self,
        max_request_bytes: int,
        on_store_unavailable: Callable[[], None] | None = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        self._max_request_bytes = max_request_bytes
        self._on_store_unavailable = on_store_unavailable
        #: None: authentication is off (every call is let through, as before).
        self._authenticator = authenticator
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
        if handler is not None and self._authenticator is not None and handler.stream_stream:
            # Server reflection: a stream, which needs any valid key (it lists the API).
            wrapped = guard_stream(handler, self._authenticator)
            self._wrapped[details.method] = wrapped
            return wrapped
        if handler is None or handler.request_deserializer is None:
            return handler
        if handler.unary_unary is not None:
            wrapped = grpc.unary_unary_rpc_method_handler(
                self._wrap(handler.unary_unary, handler.request_deserializer, details.method),
                request_deserializer=None,  # raw bytes: parsed below, with a clear error
                response_serializer=handler.response_serializer,
            )
        elif handler.unary_stream is not None:
            # A server stream (BatchWorkflows) is admitted exactly like a unary call: left
            # unwrapped it would skip authentication, validation and the error table.
            wrapped = grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(
                    handler.unary_stream, handler.request_deserializer, details.method
                ),
                request_deserializer=None,
                response_serializer=handler.response_serializer,
            )
        else:
            return handler
        self._wrapped[details.method] = wrapped
        return wrapped

    async def _admit(
        self,
        raw: bytes,
        context: grpc.aio.ServicerContext,
        parse: Callable[[bytes], Any],
        method: str,
        authenticator: Authenticator | None,
    ) -> Any:
        """The parsed request, once the caller, its size, its shape and its rights passed."""
        # Who calls is settled from metadata before the body is parsed (in the server,
        # before it is even received: AuthenticationInterceptor): an unauthenticated
        # caller learns nothing about its request.
        principal = None if authenticator is None else await caller(authenticator, context)
        limit = self._max_request_bytes
        if len(raw) > limit:
            raise ResourceExhaustedError(
                f"request of {len(raw)} bytes is over the {limit}-byte limit"
            )
        try:
            request = parse(raw)
        except (DecodeError, ValueError) as exc:
            raise InvalidArgumentError(f"malformed request message: {exc}") from exc
        check_request(request)
        if principal is not None:
            authorize_request(principal, method, request)
            current_principal.set(principal)
        return request

    async def _abort(self, exc: Exception, context: grpc.aio.ServicerContext, method: str) -> None:
        """Ends the call with the status ``exc`` maps to (the one error table)."""
        if isinstance(exc, DurableRpcError):
            if isinstance(exc, StoreUnavailableError) and self._on_store_unavailable:
                self._on_store_unavailable()
            await context.abort_with_status(to_status(exc))
        elif isinstance(exc, PayloadError):
            await context.abort_with_status(to_status(InvalidPayloadError(str(exc))))
        elif isinstance(exc, NotImplementedError):
            # What a generated servicer base raises for an RPC this server lacks.
            missing = UnimplementedError(f"{method} is not implemented by this server")
            await context.abort_with_status(to_status(missing))
        elif isinstance(exc, grpc.aio.AbortError):
            raise exc
        else:
            await context.abort_with_status(to_status(internal_error(exc, method)))

    def _wrap(self, inner: Handler, parse: Callable[[bytes], Any], method: str) -> Handler:
        authenticator = None if is_open(method) else self._authenticator

        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            try:
                request = await self._admit(raw, context, parse, method, authenticator)
                return await inner(request, context)
            except Exception as exc:
                await self._abort(exc, context, method)

        return handle

    def _wrap_stream(
        self,
        inner: Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any] | Awaitable[None]],
        parse: Callable[[bytes], Any],
        method: str,
    ) -> Callable[[bytes, grpc.aio.ServicerContext], AsyncIterator[Any]]:
        authenticator = None if is_open(method) else self._authenticator

        async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                request = await self._admit(raw, context, parse, method, authenticator)
                responses = inner(request, context)
                if inspect.isawaitable(responses):
                    # A handler that writes its messages itself (context.write, as
                    # grpc's health Watch does) and returns nothing.
                    await responses
                    return
                async for response in responses:
                    yield response
            except Exception as exc:
                await self._abort(exc, context, method)

        return handle
