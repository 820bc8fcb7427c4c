"""Fixtures: an in-memory span exporter and a tiny real grpc.aio server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durable_rpc.telemetry import current_trace_context

SERVICE = "test.v1.EchoService"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def method(name: str) -> str:
    """The full path of one of the echo service's methods."""
    return f"/{SERVICE}/{name}"


@dataclass
class Spans:
    provider: TracerProvider
    exporter: InMemorySpanExporter

    def finished(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, name: str) -> ReadableSpan:
        matches = [s for s in self.finished() if s.name == name]
        assert len(matches) == 1, [s.name for s in self.finished()]
        return matches[0]

    async def settle(self, count: int, timeout: float = 5.0) -> None:
        """Wait until ``count`` spans have finished. grpc.aio's ``context.abort()`` sends the
        status before it raises, so a client can see an aborted call's error a moment before
        the server span around the handler ends (about 1% of calls on one event loop)."""
        for _ in range(int(timeout / 0.001)):
            if len(self.finished()) >= count:
                return
            await asyncio.sleep(0.001)


@pytest.fixture
def spans() -> Spans:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Spans(provider, exporter)


@dataclass
class Seen:
    """What the handlers observed, for the tests to check."""

    metadata: list[dict[str, str]] = field(default_factory=list)
    trace_contexts: list[dict[str, str]] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)


def echo_handlers(seen: Seen) -> grpc.GenericRpcHandler:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.requests.append(request)
        seen.metadata.append({k: v for k, v in context.invocation_metadata()})
        seen.trace_contexts.append(current_trace_context())
        return request

    async def not_found(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        raise AssertionError("abort() returned")

    async def internal(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.INTERNAL, "store exploded")
        raise AssertionError("abort() returned")

    async def boom(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise RuntimeError("kaboom")

    async def set_code(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        context.set_code(grpc.StatusCode.UNAVAILABLE)
        context.set_details("try later")
        return b""

    async def echo_text(request: str, context: grpc.aio.ServicerContext) -> list[str]:
        seen.requests.append(request)
        return [request, request.upper()]

    async def stream(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for _ in range(3):
            yield request

    raw: dict[str, Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]] = {
        "Echo": echo,
        "NotFound": not_found,
        "Internal": internal,
        "Boom": boom,
        "SetCode": set_code,
    }
    handlers = {name: grpc.unary_unary_rpc_method_handler(fn) for name, fn in raw.items()}
    handlers["EchoText"] = grpc.unary_unary_rpc_method_handler(
        echo_text,
        request_deserializer=lambda b: b.decode(),
        response_serializer=lambda parts: "|".join(parts).encode(),
    )
    handlers["Stream"] = grpc.unary_stream_rpc_method_handler(stream)
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


@dataclass
class Server:
    port: int
    seen: Seen

    def channel(self, interceptors: Sequence[Any] = ()) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(
            f"127.0.0.1:{self.port}", interceptors=list(interceptors) or None
        )


class ServerFactory(Protocol):
    async def __call__(
        self, interceptors: Sequence[Any], handler: grpc.GenericRpcHandler | None = None
    ) -> Server: ...


@pytest.fixture
async def start_server() -> AsyncIterator[ServerFactory]:
    servers: list[grpc.aio.Server] = []

    async def start(
        interceptors: Sequence[Any], handler: grpc.GenericRpcHandler | None = None
    ) -> Server:
        seen = Seen()
        server = grpc.aio.server(interceptors=list(interceptors))
        server.add_generic_rpc_handlers((handler or echo_handlers(seen),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        return Server(port, seen)

    yield start
    for server in servers:
        await server.stop(None)
