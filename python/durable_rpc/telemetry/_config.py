"""One-call tracing setup for the server and worker processes."""

from __future__ import annotations

import importlib
import os

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

EXPORTERS = ("console", "otlp")

# Tried in order for exporter="otlp"; both read the standard OTEL_EXPORTER_OTLP_* variables.
_OTLP_MODULES = (
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)


def configure_tracing(service_name: str, exporter: str | None) -> TracerProvider | None:
    """Install a global SDK ``TracerProvider`` exporting through a ``BatchSpanProcessor``.

    ``exporter``:

    - ``None``: do nothing and return ``None``; OTel stays as it is (the no-op default, or
      whatever ``opentelemetry-instrument`` or the embedding application configured).
    - ``"console"``: print finished spans to stdout (``ConsoleSpanExporter``).
    - ``"otlp"``: export with OTLP. The exporter is not a dependency of durable-rpc: install
      ``opentelemetry-exporter-otlp-proto-grpc`` (or ``-proto-http``, or the
      ``opentelemetry-exporter-otlp`` bundle) and configure it with the standard variables,
      e.g. ``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_HEADERS``,
      ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_CERTIFICATE``.
      Alternatively leave ``exporter=None`` and run under ``opentelemetry-instrument`` with
      ``OTEL_TRACES_EXPORTER=otlp``.

    The resource is ``service.name=service_name`` unless ``OTEL_SERVICE_NAME`` is set, merged
    with ``OTEL_RESOURCE_ATTRIBUTES``; the batch processor honours ``OTEL_BSP_*``. OTel allows
    the global provider to be set once per process: call this once, at start-up. Returns the
    provider (it flushes and shuts down at interpreter exit; ``shutdown()`` does it sooner).
    """
    if exporter is None:
        return None
    provider = build_tracer_provider(service_name, exporter)
    trace.set_tracer_provider(provider)
    return provider


def build_tracer_provider(service_name: str, exporter: str) -> TracerProvider:
    """The provider :func:`configure_tracing` installs, without installing it."""
    span_exporter = _exporter(exporter)
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(span_exporter))
    return provider


def _exporter(kind: str) -> SpanExporter:
    if kind == "console":
        return ConsoleSpanExporter()
    if kind == "otlp":
        for module_name in _OTLP_MODULES:
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue
            otlp_exporter: SpanExporter = module.OTLPSpanExporter()
            return otlp_exporter
        # A ModuleNotFoundError, as importing it directly would raise: callers (the CLI)
        # recognise a missing optional package by its type and name.
        raise ModuleNotFoundError(
            "the OTLP trace exporter is not installed: "
            "pip install opentelemetry-exporter-otlp-proto-grpc (or -proto-http)",
            name=_OTLP_MODULES[0],
        )
    raise ValueError(f"unknown trace exporter {kind!r}; expected one of {', '.join(EXPORTERS)}")
