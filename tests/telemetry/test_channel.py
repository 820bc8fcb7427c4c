"""TracingChannel (client tracing without grpc interceptors) and the no-SDK fast paths."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from durable_rpc import Client
from durable_rpc.client._payload_channel import PayloadChannel
from durable_rpc.telemetry import TracingChannel, TracingServerInterceptor
from tests.telemetry.conftest import (
    PARENT_ID,
    SERVICE,
    TRACE_ID,
    TRACEPARENT,
    Server,
    ServerFactory,
    Spans,
    method,
)


def traced(server: Server, spans: Spans | None = None) -> TracingChannel:
    return TracingChannel(server.channel(), spans.provider if spans else None)


def no_sdk() -> None:
    assert not isinstance(trace.get_tracer_provider(), SdkTracerProvider)


async def test_client_and_server_spans_share_one_trace(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([TracingServerInterceptor(spans.provider)])
    tracer = spans.provider.get_tracer("test")
    async with traced(server, spans) as channel:
        with tracer.start_as_current_span("caller") as caller:
            reply = await channel.unary_unary(method("Echo"))(
                b"hi", metadata=(("x-request-id", "r-1"),)
            )
    assert reply == b"hi"

    client = next(s for s in spans.finished() if s.kind is SpanKind.CLIENT)
    srv = next(s for s in spans.finished() if s.kind is SpanKind.SERVER)
    assert client.name == srv.name == f"{SERVICE}/Echo"
    assert dict(client.attributes or {}) == {
        "rpc.system": "grpc",
        "rpc.service": SERVICE,
        "rpc.method": "Echo",
        "rpc.grpc.status_code": 0,
    }
    assert client.status.status_code is StatusCode.UNSET
    trace_id = caller.get_span_context().trace_id
    assert {client.context.trace_id, srv.context.trace_id} == {trace_id}
    assert client.parent is not None and client.parent.span_id == caller.get_span_context().span_id
    assert srv.parent is not None and srv.parent.span_id == client.context.span_id
    seen = server.seen.metadata[0]
    assert seen["x-request-id"] == "r-1"
    assert seen["traceparent"].startswith(f"00-{trace_id:032x}-{client.context.span_id:016x}-")


async def test_client_span_without_a_parent_starts_a_trace(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([])
    async with traced(server, spans) as channel:
        # A stale traceparent passed by the caller is replaced by the span's own.
        await channel.unary_unary(method("Echo"))(b"x", metadata=(("traceparent", TRACEPARENT),))
    [client] = spans.finished()
    assert client.parent is None
    assert server.seen.metadata[0]["traceparent"].startswith(f"00-{client.context.trace_id:032x}")


async def test_client_span_errors_on_any_non_ok_code(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([])
    async with traced(server, spans) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary(method("NotFound"))(b"x")
        assert raised.value.code() is grpc.StatusCode.NOT_FOUND
        assert raised.value.details() == "no such thing"
        with pytest.raises(grpc.aio.AioRpcError):
            await channel.unary_unary(method("SetCode"))(b"x")
        assert await channel.unary_unary(method("Echo"))(b"y") == b"y"

    not_found, unavailable, ok = spans.finished()
    assert not_found.kind is SpanKind.CLIENT
    assert (not_found.attributes or {})["rpc.grpc.status_code"] == 5
    assert not_found.status.status_code is StatusCode.ERROR
    assert not_found.status.description == "no such thing"
    assert (unavailable.attributes or {})["rpc.grpc.status_code"] == 14
    assert unavailable.status.description == "try later"
    assert ok.status.status_code is StatusCode.UNSET


def slow_handler(started: asyncio.Event) -> grpc.GenericRpcHandler:
    async def slow(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        started.set()
        await asyncio.sleep(30)
        return request

    return grpc.method_handlers_generic_handler(
        SERVICE, {"Slow": grpc.unary_unary_rpc_method_handler(slow)}
    )


@pytest.mark.parametrize("with_sdk", [True, False])
async def test_task_cancellation_cancels_the_call(
    spans: Spans, start_server: ServerFactory, with_sdk: bool
) -> None:
    """Long polls are stopped by cancelling the awaiting task; the RPC must go with it."""
    started = asyncio.Event()
    server = await start_server([], slow_handler(started))
    async with traced(server, spans if with_sdk else None) as channel:
        poll = asyncio.ensure_future(channel.unary_unary(method("Slow"))(b"x"))
        await asyncio.wait_for(started.wait(), 10)
        poll.cancel()
        with pytest.raises(asyncio.CancelledError):
            await poll
    if with_sdk:
        [client] = spans.finished()
        assert (client.attributes or {})["rpc.grpc.status_code"] == 1
        assert client.status.status_code is StatusCode.ERROR
        assert client.status.description == "CANCELLED"
    else:
        assert spans.finished() == []


@pytest.mark.parametrize("with_sdk", [True, False])
async def test_keyword_arguments_pass_through(
    spans: Spans, start_server: ServerFactory, with_sdk: bool
) -> None:
    started = asyncio.Event()
    server = await start_server([], slow_handler(started))
    async with traced(server, spans if with_sdk else None) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await channel.unary_unary(method("Slow"))(b"x", timeout=0.2, wait_for_ready=True)
    assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
    if with_sdk:
        [client] = spans.finished()
        assert (client.attributes or {})["rpc.grpc.status_code"] == 4
        assert client.status.status_code is StatusCode.ERROR


async def test_serializers_and_streams_go_to_the_wrapped_channel(
    spans: Spans, start_server: ServerFactory
) -> None:
    server = await start_server([])
    async with traced(server, spans) as channel:
        echo_text = channel.unary_unary(
            method("EchoText"),
            request_serializer=str.encode,
            response_deserializer=lambda b: b.decode().split("|"),
        )
        assert await echo_text("abc") == ["abc", "ABC"]
        got = [m async for m in channel.unary_stream(method("Stream"))(b"s")]
        assert got == [b"s", b"s", b"s"]
        assert channel.get_state() is grpc.ChannelConnectivity.READY
    assert [s.name for s in spans.finished()] == [f"{SERVICE}/EchoText"]


async def test_without_an_sdk_calls_go_straight_through(start_server: ServerFactory) -> None:
    no_sdk()
    server = await start_server([TracingServerInterceptor()])
    async with traced(server) as channel:
        echo = channel.unary_unary(method("Echo"))
        call = echo(b"x", metadata=(("x-request-id", "r-1"),))
        # grpc's own call object, untouched: no span, no metadata added.
        assert isinstance(call, grpc.aio.UnaryUnaryCall)
        assert await call == b"x"
        assert await call.code() is grpc.StatusCode.OK
        # A caller's context (an incoming one, say) is still passed on.
        remote = SpanContext(
            int(TRACE_ID, 16), int(PARENT_ID, 16), True, TraceFlags(TraceFlags.SAMPLED)
        )
        with trace.use_span(NonRecordingSpan(remote)):
            await echo(b"y")
    assert server.seen.metadata[0]["x-request-id"] == "r-1"
    assert "traceparent" not in server.seen.metadata[0]
    assert server.seen.trace_contexts[0] == {}
    assert server.seen.metadata[1]["traceparent"] == TRACEPARENT
    assert server.seen.trace_contexts[1] == {"traceparent": TRACEPARENT}


async def test_without_an_sdk_the_server_keeps_only_the_span_context(
    start_server: ServerFactory,
) -> None:
    """As with an SDK (the SERVER span is made current in the current context), incoming
    baggage is not made current: only the caller's span context goes into history."""
    no_sdk()
    server = await start_server([TracingServerInterceptor()])
    async with server.channel() as channel:
        echo = channel.unary_unary(method("Echo"))
        await echo(b"x", metadata=(("traceparent", TRACEPARENT), ("baggage", "tenant=a")))
        await echo(b"y", metadata=(("baggage", "tenant=b"),))
        await echo(b"z")
    assert server.seen.trace_contexts == [{"traceparent": TRACEPARENT}, {}, {}]


async def test_server_builds_the_wrapped_handler_once_per_method(
    spans: Spans, start_server: ServerFactory
) -> None:
    looked_up: list[str] = []

    class Counting(grpc.aio.ServerInterceptor):  # type: ignore[misc]
        async def intercept_service(
            self,
            continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
            details: grpc.HandlerCallDetails,
        ) -> Any:
            looked_up.append(details.method)
            return await continuation(details)

    server = await start_server([TracingServerInterceptor(spans.provider), Counting()])
    async with server.channel() as channel:
        for request in (b"a", b"b", b"c"):
            await channel.unary_unary(method("Echo"))(request)
            # Metadata is read per call, not from the cached first call.
            await channel.unary_unary(method("Echo"))(
                request, metadata=(("traceparent", TRACEPARENT),)
            )
    assert looked_up == [method("Echo")]
    parents = [s.parent.span_id if s.parent else None for s in spans.finished()]
    assert parents == [None, int(PARENT_ID, 16)] * 3


async def test_client_connect_uses_a_tracing_channel(start_server: ServerFactory) -> None:
    server = await start_server([])
    client = await Client.connect(f"127.0.0.1:{server.port}", timeout=10)
    try:
        # The payload wrapper is outermost; every call it makes, uploads and downloads
        # included, goes through the tracing channel beneath it.
        assert isinstance(client.channel, PayloadChannel)
        assert isinstance(client.channel.channel, TracingChannel)
    finally:
        await client.close()


def test_a_global_provider_set_after_start_is_honoured() -> None:
    # The global provider can be set once per process, so this runs in its own interpreter.
    script = textwrap.dedent(
        """
        import asyncio

        import grpc
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from durable_rpc.telemetry import TracingChannel, TracingServerInterceptor
        from tests.telemetry.conftest import SERVICE, Seen, echo_handlers


        async def main() -> None:
            server = grpc.aio.server(interceptors=[TracingServerInterceptor()])
            server.add_generic_rpc_handlers((echo_handlers(Seen()),))
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            channel = TracingChannel(grpc.aio.insecure_channel(f"127.0.0.1:{port}"))
            echo = channel.unary_unary(f"/{SERVICE}/Echo")
            await echo(b"before")
            exporter = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            trace.set_tracer_provider(provider)
            await echo(b"after")
            await channel.close()
            await server.stop(None)
            print(sorted((s.kind.name, s.name) for s in exporter.get_finished_spans()))


        asyncio.run(main())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    name = f"{SERVICE}/Echo"
    assert done.stdout.strip() == str([("CLIENT", name), ("SERVER", name)])
