"""Capturing and restoring trace context carried through workflow history."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate
from opentelemetry.context import Context


def current_trace_context() -> dict[str, str]:
    """The current trace context as a plain ``dict[str, str]``, to store in history.

    With the default W3C propagator the dict holds ``traceparent`` (and ``tracestate`` and
    ``baggage`` when there are any). Treat it as an opaque string map: store it as-is and hand it
    back to :func:`workflow_task_span` / :func:`activity_span`. It is empty when there is no
    active span context (for example when tracing is not configured and nothing came in).
    """
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def context_from_carrier(trace_context: Mapping[str, str] | None) -> Context | None:
    """The OTel context to parent on: the carried one, or ``None`` (the current one)."""
    if not trace_context:
        return None
    return propagate.extract(trace_context)
