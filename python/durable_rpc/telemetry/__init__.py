"""OpenTelemetry tracing and metrics for durable-rpc.

- :class:`TracingServerInterceptor`: a SERVER span per RPC, parented on the caller's context.
- :class:`TracingChannel`: a CLIENT span per call, context sent in metadata (a channel
  wrapper: cheaper than grpc's client interceptors; :func:`tracing_client_interceptors` does
  the same as interceptors).
- :func:`workflow_task_span`, :func:`activity_span`: a span per real execution on a worker,
  parented on the trace context carried through history (:func:`current_trace_context`),
  so a workflow run is one trace.
- :class:`EngineMetrics`: counters and histograms with bounded labels.
- :func:`configure_tracing`: install an SDK tracer provider with a console or OTLP exporter.

Everything uses the global OTel providers unless one is passed in; with none configured OTel's
no-op implementations make it all nearly free, and the RPC tracing checks for that on each call
and then skips span handling altogether (an incoming or current trace context is still passed
on).
"""

from __future__ import annotations

from durable_rpc.telemetry._client import TracingChannel, tracing_client_interceptors
from durable_rpc.telemetry._config import EXPORTERS, build_tracer_provider, configure_tracing
from durable_rpc.telemetry._context import current_trace_context
from durable_rpc.telemetry._metrics import EngineMetrics, Outcome, TaskKind
from durable_rpc.telemetry._server import TracingServerInterceptor
from durable_rpc.telemetry._worker import activity_span, workflow_task_span

__all__ = [
    "EXPORTERS",
    "EngineMetrics",
    "Outcome",
    "TaskKind",
    "TracingChannel",
    "TracingServerInterceptor",
    "activity_span",
    "build_tracer_provider",
    "configure_tracing",
    "current_trace_context",
    "tracing_client_interceptors",
    "workflow_task_span",
]
