"""Server-side tracing: one SERVER span per unary-unary RPC."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from durable_rpc.telemetry._common import (
    METADATA_GETTER,
    RPC_GRPC_STATUS_CODE,
    get_tracer,
    propagation_fields,
    rpc_method_info,
    tracing_enabled,
)
from durable_rpc.telemetry._unary_interceptor import Handler, UnaryWrappingInterceptor

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


class TracingServerInterceptor(UnaryWrappingInterceptor):
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

    With no SDK configured (no provider passed in and the global one is OTel's no-op/proxy
    default, checked per call so a provider installed later is honoured) no span is made: the
    incoming trace context, if the metadata carries one, is only made current for the handler.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        super().__init__()
        self._tracer_provider = tracer_provider
        self._tracer = get_tracer(tracer_provider)

    def _wrap(self, inner: Handler, method: str) -> Handler:
        tracer = self._tracer
        tracer_provider = self._tracer_provider
        name, attributes = rpc_method_info(method)

        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            metadata = context.invocation_metadata()
            if not tracing_enabled(tracer_provider):
                # No SDK: no span to record. Only make an incoming span context current, so
                # what the handler stores in history still belongs to the caller's trace (as
                # with a span: incoming baggage is not made current either way).
                fields = propagation_fields()
                if not metadata or not any(key in fields for key, _ in metadata):
                    return await inner(request, context)
                caller = trace.get_current_span(propagate.extract(metadata, getter=METADATA_GETTER))
                if not caller.get_span_context().is_valid:
                    return await inner(request, context)
                token = otel_context.attach(trace.set_span_in_context(caller))
                try:
                    return await inner(request, context)
                finally:
                    otel_context.detach(token)

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
