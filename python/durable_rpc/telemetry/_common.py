"""Shared names and small helpers for the telemetry package."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter, TextMapPropagator
from opentelemetry.util.types import AttributeValue

#: Instrumentation scope of every tracer and meter this package creates.
SCOPE = "durable_rpc"

# Span attribute keys (RPC ones follow the OpenTelemetry RPC semantic conventions).
RPC_SYSTEM = "rpc.system"
RPC_SERVICE = "rpc.service"
RPC_METHOD = "rpc.method"
RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"
WORKFLOW_TYPE = "durable_rpc.workflow_type"
WORKFLOW_ID = "durable_rpc.workflow_id"
RUN_ID = "durable_rpc.run_id"
ACTIVITY_TYPE = "durable_rpc.activity_type"
ATTEMPT = "durable_rpc.attempt"


def get_tracer(tracer_provider: trace.TracerProvider | None) -> trace.Tracer:
    """A tracer from ``tracer_provider``, or from the global provider.

    With no provider, OTel hands back a proxy tracer that follows the global provider if it is
    set later and is a no-op until then.
    """
    return trace.get_tracer(SCOPE, tracer_provider=tracer_provider)


# What OTel hands out while no SDK is configured: every span it makes is non-recording.
_DEFAULT_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def tracing_enabled(tracer_provider: trace.TracerProvider | None) -> bool:
    """Whether spans can be recorded: ``tracer_provider`` (or, if ``None``, the global provider)
    is not OTel's no-op or proxy default.

    Cheap enough to ask on every call, so a global provider set later is honoured at once.
    """
    provider = trace.get_tracer_provider() if tracer_provider is None else tracer_provider
    return not isinstance(provider, _DEFAULT_PROVIDERS)


_fields: tuple[TextMapPropagator | None, frozenset[str]] = (None, frozenset())


def propagation_fields() -> frozenset[str]:
    """The carrier keys the global propagator reads (``traceparent``, ``tracestate``,
    ``baggage`` by default), cached until the global propagator changes."""
    global _fields
    textmap = propagate.get_global_textmap()
    cached, fields = _fields
    if textmap is not cached:
        fields = frozenset(key.lower() for key in textmap.fields)
        _fields = (textmap, fields)
    return fields


@lru_cache(maxsize=512)
def rpc_method_info(full_method: str) -> tuple[str, Mapping[str, AttributeValue]]:
    """Span name and attributes for ``/package.Service/Method`` (cached: methods are few)."""
    path = full_method.lstrip("/")
    service, sep, method = path.rpartition("/")
    attributes: dict[str, AttributeValue] = {RPC_SYSTEM: "grpc"}
    if sep:
        attributes[RPC_SERVICE] = service
        attributes[RPC_METHOD] = method
    else:
        attributes[RPC_METHOD] = path
    return path, attributes


def method_name(method: str | bytes) -> str:
    return method.decode() if isinstance(method, bytes) else method


class MetadataGetter(Getter[Iterable[tuple[str, str | bytes]] | None]):
    """Reads propagation fields from gRPC metadata (pairs of key and value; keys lowercase)."""

    def get(self, carrier: Iterable[tuple[str, str | bytes]] | None, key: str) -> list[str] | None:
        if not carrier:
            return None
        key = key.lower()
        values = [v for k, v in carrier if k == key and isinstance(v, str)]
        return values or None

    def keys(self, carrier: Iterable[tuple[str, str | bytes]] | None) -> list[str]:
        return [k for k, _ in carrier] if carrier else []


METADATA_GETTER = MetadataGetter()
