"""Client-side tracing: one CLIENT span per unary-unary call, context sent as metadata."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from durable_rpc.telemetry._common import (
    RPC_GRPC_STATUS_CODE,
    get_tracer,
    method_name,
    rpc_method_info,
)


class _TracingUnaryUnaryClientInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Awaitable[Any]],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        name, attributes = rpc_method_info(method_name(client_call_details.method))
        with self._tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            call_details = grpc.aio.ClientCallDetails(
                client_call_details.method,
                client_call_details.timeout,
                _with_trace_context(client_call_details.metadata),
                client_call_details.credentials,
                client_call_details.wait_for_ready,
            )
            try:
                call = await continuation(call_details, request)
                code: grpc.StatusCode = await call.code()  # waits for the call to finish
            except asyncio.CancelledError:
                if span.is_recording():
                    span.set_attribute(RPC_GRPC_STATUS_CODE, grpc.StatusCode.CANCELLED.value[0])
                    span.set_status(Status(StatusCode.ERROR, "CANCELLED"))
                raise
            except Exception as exc:
                if span.is_recording():
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise
            if span.is_recording():
                span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
                if code != grpc.StatusCode.OK:
                    span.set_status(Status(StatusCode.ERROR, await call.details() or code.name))
            # The call is complete; awaiting it again yields the response or raises AioRpcError.
            return call


def _with_trace_context(metadata: Iterable[tuple[str, Any]] | None) -> grpc.aio.Metadata:
    """``metadata`` plus the current trace context (replacing any propagation fields in it)."""
    fields: dict[str, str] = {}
    propagate.inject(fields)
    kept = [(k, v) for k, v in metadata or () if k not in fields]
    return grpc.aio.Metadata(*kept, *fields.items())


def tracing_client_interceptors(tracer_provider: trace.TracerProvider | None = None) -> list[Any]:
    """Client interceptors for ``grpc.aio.*_channel(..., interceptors=...)``.

    Each unary-unary call gets a CLIENT span (``package.Service/Method``, same attributes as
    the server span, ERROR status on any non-OK code) and the trace context is injected into
    the outgoing metadata with the global OTel propagator (``traceparent``/``tracestate`` by
    default). Other call kinds are not intercepted.
    """
    return [_TracingUnaryUnaryClientInterceptor(get_tracer(tracer_provider))]
