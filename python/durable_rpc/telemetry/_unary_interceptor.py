"""The shape shared by the server interceptors that wrap each unary-unary handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from durable_rpc.telemetry._common import method_name

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]


class UnaryWrappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps every unary-unary handler with ``_wrap(inner, method)``, once per method.

    Streaming handlers and unknown methods pass through untouched; the handler's
    serializers are kept as they are. The wrapped handler is cached by method because
    ``intercept_service`` runs on every call (this is a hot path).
    """

    def __init__(self) -> None:
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
        if handler is None or handler.unary_unary is None:
            return handler
        wrapped = grpc.unary_unary_rpc_method_handler(
            self._wrap(handler.unary_unary, method_name(details.method)),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        self._wrapped[details.method] = wrapped
        return wrapped

    def _wrap(self, inner: Handler, method: str) -> Handler:
        """The handler that runs ``inner`` for ``method`` (``/package.Service/Method``)."""
        raise NotImplementedError
