"""Server and client interceptors against a real grpc.aio server on 127.0.0.1."""

from __future__ import annotations

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.trace import SpanKind, StatusCode

from durable_rpc.errors import NotFoundError
from durable_rpc.server._interceptor import ErrorInterceptor
from durable_rpc.telemetry import TracingServerInterceptor, tracing_client_interceptors
from tests.telemetry.conftest import (
    PARENT_ID,
    SERVICE,
    TRACE_ID,
    TRACEPARENT,
    ServerFactory,
    Spans,
    method,
)


async def test_server_span_per_call_with_rpc_attributes(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([TracingServerInterceptor(spans.provider)])
    async with server.channel() as channel:
        echo = channel.unary_unary(method("Echo"))
        assert await echo(b"one") == b"one"
        assert await echo(b"two") == b"two"

    finished = spans.finished()
    assert len(finished) == 2
    for span in finished:
        assert span.name == f"{SERVICE}/Echo"
        assert span.kind is SpanKind.SERVER
        assert dict(span.attributes or {}) == {
            "rpc.system": "grpc",
            "rpc.service": SERVICE,
            "rpc.method": "Echo",
            "rpc.grpc.status_code": 0,
        }
        assert span.status.status_code is StatusCode.UNSET
        assert span.parent is None  # no traceparent came in
    assert server.seen.requests == [b"one", b"two"]


async def test_server_span_parents_on_incoming_traceparent(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([TracingServerInterceptor(spans.provider)])
    async with server.channel() as channel:
        await channel.unary_unary(method("Echo"))(b"x", metadata=(("traceparent", TRACEPARENT),))

    span = spans.named(f"{SERVICE}/Echo")
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and span.parent.is_remote
    assert format(span.parent.span_id, "016x") == PARENT_ID
    # Inside the handler the server span is current: that is what gets carried into history.
    carried = server.seen.trace_contexts[0]["traceparent"]
    assert carried.startswith(f"00-{TRACE_ID}-{span.context.span_id:016x}-")


@pytest.mark.parametrize(
    ("name", "code", "is_error", "description"),
    [
        ("NotFound", grpc.StatusCode.NOT_FOUND, False, None),
        ("Internal", grpc.StatusCode.INTERNAL, True, "store exploded"),
        ("SetCode", grpc.StatusCode.UNAVAILABLE, True, "try later"),
    ],
)
async def test_server_span_status_from_grpc_code(
    spans: Spans,
    start_server: ServerFactory,
    name: str,
    code: grpc.StatusCode,
    is_error: bool,
    description: str | None,
) -> None:
    server = await start_server([TracingServerInterceptor(spans.provider)])
    async with server.channel() as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary(method(name))(b"x")
    assert raised.value.code() is code

    await spans.settle(1)  # an abort sends the status before the span ends
    span = spans.named(f"{SERVICE}/{name}")
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == code.value[0]
    if is_error:
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == description
    else:  # a caller's error (NOT_FOUND, ...) is not a server fault
        assert span.status.status_code is StatusCode.UNSET
    assert not span.events  # an abort is not an exception worth recording


async def test_server_span_records_unhandled_exception(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([TracingServerInterceptor(spans.provider)])
    async with server.channel() as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary(method("Boom"))(b"x")
    assert raised.value.code() is grpc.StatusCode.UNKNOWN

    span = spans.named(f"{SERVICE}/Boom")
    assert span.attributes is not None
    assert span.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNKNOWN.value[0]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "RuntimeError: kaboom"
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "RuntimeError"


async def test_serializers_pass_through_and_streams_are_untouched(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([TracingServerInterceptor(spans.provider)])
    async with server.channel() as channel:
        # EchoText has a request_deserializer and a response_serializer; they must still run.
        assert await channel.unary_unary(method("EchoText"))(b"abc") == b"abc|ABC"
        assert server.seen.requests == ["abc"]
        # Streaming handlers are passed through without a span.
        got = [m async for m in channel.unary_stream(method("Stream"))(b"s")]
        assert got == [b"s", b"s", b"s"]
    assert [s.name for s in spans.finished()] == [f"{SERVICE}/EchoText"]


async def test_outermost_in_front_of_the_error_interceptor(
    spans: Spans, start_server: ServerFactory
) -> None:
    """The production order: tracing first, then ErrorInterceptor (which drops the
    request_deserializer and maps domain errors to statuses by aborting)."""

    async def lookup(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if request == b"missing":
            raise NotFoundError("workflow not found")
        if request == b"bug":
            raise KeyError("oops")
        return request

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {"Lookup": grpc.unary_unary_rpc_method_handler(lookup, request_deserializer=bytes)},
    )
    interceptors = [TracingServerInterceptor(spans.provider), ErrorInterceptor(64)]
    server = await start_server(interceptors, handler)
    codes = []
    async with server.channel() as channel:
        lookup_call = channel.unary_unary(method("Lookup"))
        assert await lookup_call(b"ok") == b"ok"
        for request in (b"missing", b"bug", b"x" * 100):
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await lookup_call(request)
            codes.append(raised.value.code())
    assert codes == [
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ]

    await spans.settle(4)  # an abort sends the status before the span ends
    finished = spans.finished()
    assert [(s.attributes or {})["rpc.grpc.status_code"] for s in finished] == [0, 5, 13, 8]
    assert [s.status.status_code for s in finished] == [
        StatusCode.UNSET,
        StatusCode.UNSET,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]


async def test_client_and_server_spans_share_one_trace(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([TracingServerInterceptor(spans.provider)])
    tracer = spans.provider.get_tracer("test")
    async with server.channel(tracing_client_interceptors(spans.provider)) as channel:
        with tracer.start_as_current_span("caller") as caller:
            reply = await channel.unary_unary(method("Echo"))(
                b"hi", metadata=(("x-request-id", "r-1"),)
            )
    assert reply == b"hi"

    client = next(s for s in spans.finished() if s.kind is SpanKind.CLIENT)
    srv = next(s for s in spans.finished() if s.kind is SpanKind.SERVER)
    assert client.name == srv.name == f"{SERVICE}/Echo"
    trace_id = caller.get_span_context().trace_id
    assert {client.context.trace_id, srv.context.trace_id} == {trace_id}
    assert client.parent is not None and client.parent.span_id == caller.get_span_context().span_id
    assert srv.parent is not None and srv.parent.span_id == client.context.span_id
    assert (client.attributes or {})["rpc.grpc.status_code"] == 0
    # The caller's own metadata survives next to the injected traceparent.
    seen = server.seen.metadata[0]
    assert seen["x-request-id"] == "r-1"
    assert seen["traceparent"].startswith(f"00-{trace_id:032x}-{client.context.span_id:016x}-")


async def test_client_span_errors_on_any_non_ok_code(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([])
    async with server.channel(tracing_client_interceptors(spans.provider)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary(method("NotFound"))(b"x")
        assert raised.value.details() == "no such thing"
        # A call object is still usable as usual through the interceptor.
        call = channel.unary_unary(method("Echo"))(b"y")
        assert await call == b"y"
        assert await call.code() is grpc.StatusCode.OK

    failed, ok = spans.finished()
    assert failed.kind is SpanKind.CLIENT
    assert (failed.attributes or {})["rpc.grpc.status_code"] == 5
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "no such thing"
    assert ok.status.status_code is StatusCode.UNSET


async def test_without_a_tracer_provider_context_still_passes_through(
    start_server: ServerFactory,
) -> None:
    """No SDK configured: the no-op tracer records nothing, but an incoming trace context is
    kept current, so what the server stores in history still belongs to the caller's trace."""
    assert not isinstance(trace.get_tracer_provider(), SdkTracerProvider)
    server = await start_server([TracingServerInterceptor()])
    async with server.channel(tracing_client_interceptors()) as channel:
        await channel.unary_unary(method("Echo"))(b"x", metadata=(("traceparent", TRACEPARENT),))
        await channel.unary_unary(method("Echo"))(b"y")
    assert server.seen.trace_contexts[0] == {"traceparent": TRACEPARENT}
    assert server.seen.trace_contexts[1] == {}
    assert "traceparent" not in server.seen.metadata[1]
