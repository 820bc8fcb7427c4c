"""Server-side tracing: one SERVER span per unary-unary RPC."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from durable_rpc.telemetry._common import (
    METADATA_GETTER,
    RPC_GRPC_STATUS_CODE,
    get_tracer,
    method_name,
    rpc_method_info,
)

Handler = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]

# Per the RPC semantic conventions a server span is an error only for these codes; the rest
# (NOT_FOUND, FAILED_PRECONDITION, ...) are the caller's problem, and so errors on CLIENT spans.
_SERVER_ERROR_CODES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


class TracingServerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps every unary-unary handler in a SERVER span named ``package.Service/Method``.

    The parent is the W3C trace context (``traceparent``/``tracestate``) found in the request
    metadata, read through the globally configured OTel propagator. The span carries
    ``rpc.system``, ``rpc.service``, ``rpc.method`` and ``rpc.grpc.status_code``; its status is
    ERROR for server-fault codes (UNKNOWN, DEADLINE_EXCEEDED, UNIMPLEMENTED, INTERNAL,
    UNAVAILABLE, DATA_LOSS) with the status details as description, and an exception escaping the
    handler (other than an abort) is recorded on it.

    Request and response handling is untouched: the handler's ``request_deserializer`` and
    ``response_serializer`` are passed through as they are (set or ``None``), and streaming
    handlers are returned unwrapped. Put it first in ``grpc.aio.server(interceptors=[...])`` so
    it is outermost and sees the final status set by the other interceptors.

    With no tracer provider configured the tracer is OTel's no-op one: no span is recorded, only
    the incoming context is made current.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self._tracer = get_tracer(tracer_provider)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._wrap(handler.unary_unary, details),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _wrap(self, inner: Handler, details: grpc.HandlerCallDetails) -> Handler:
        tracer = self._tracer
        name, attributes = rpc_method_info(method_name(details.method))
        metadata = details.invocation_metadata

        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            parent = propagate.extract(metadata, getter=METADATA_GETTER)
            with tracer.start_as_current_span(
                name,
                context=parent,
                kind=SpanKind.SERVER,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    response = await inner(request, context)
                except grpc.aio.AbortError:
                    # context.abort*(): the code and details are already on the context.
                    _finish(span, context.code() or grpc.StatusCode.UNKNOWN, context.details())
                    raise
                except asyncio.CancelledError:
                    # The client went away or the deadline passed.
                    _finish(span, grpc.StatusCode.CANCELLED, None)
                    raise
                except Exception as exc:
                    # grpc answers an unhandled exception with UNKNOWN.
                    if span.is_recording():
                        span.record_exception(exc)
                    _finish(span, grpc.StatusCode.UNKNOWN, f"{type(exc).__name__}: {exc}")
                    raise
                _finish(span, context.code() or grpc.StatusCode.OK, context.details())
                return response

        return handle


def _finish(span: Span, code: grpc.StatusCode, details: str | bytes | None) -> None:
    if not span.is_recording():
        return
    span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
    if code in _SERVER_ERROR_CODES:
        if isinstance(details, bytes):
            details = details.decode(errors="replace")
        span.set_status(Status(StatusCode.ERROR, details or code.name))
