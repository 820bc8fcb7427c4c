"""Spans for real workflow-task and activity executions on a worker."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind
from opentelemetry.util.types import AttributeValue

from durable_rpc.telemetry._common import (
    ACTIVITY_TYPE,
    ATTEMPT,
    RUN_ID,
    WORKFLOW_ID,
    WORKFLOW_TYPE,
    get_tracer,
)
from durable_rpc.telemetry._context import context_from_carrier

_TRACER = get_tracer(None)  # a proxy: follows the global provider even if it is set later


def workflow_task_span(
    workflow_type: str,
    workflow_id: str,
    run_id: str,
    attempt: int,
    trace_context: Mapping[str, str] | None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
) -> AbstractContextManager[Span]:
    """A span ``RunWorkflowTask:<workflow_type>`` around one real workflow-task execution.

    Enter it once per workflow task the worker actually runs, around the whole task (replay
    of earlier history included); replayed history must not open spans of its own. The span is
    a child of ``trace_context`` (as captured by :func:`current_trace_context` and carried in
    history), or of the current span when that is ``None`` or empty. It is current inside the
    block, so :func:`current_trace_context` there yields a context to carry into the activities
    and timers the task schedules. An exception leaving the block is recorded and sets ERROR.
    """
    attributes: dict[str, AttributeValue] = {
        WORKFLOW_TYPE: workflow_type,
        WORKFLOW_ID: workflow_id,
        RUN_ID: run_id,
        ATTEMPT: attempt,
    }
    return _start(f"RunWorkflowTask:{workflow_type}", attributes, trace_context, tracer_provider)


def activity_span(
    activity_type: str,
    workflow_id: str,
    run_id: str,
    attempt: int,
    trace_context: Mapping[str, str] | None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
) -> AbstractContextManager[Span]:
    """A span ``RunActivity:<activity_type>`` around one activity attempt; as
    :func:`workflow_task_span`, parented on the context carried with the activity task."""
    attributes: dict[str, AttributeValue] = {
        ACTIVITY_TYPE: activity_type,
        WORKFLOW_ID: workflow_id,
        RUN_ID: run_id,
        ATTEMPT: attempt,
    }
    return _start(f"RunActivity:{activity_type}", attributes, trace_context, tracer_provider)


def _start(
    name: str,
    attributes: Mapping[str, AttributeValue],
    trace_context: Mapping[str, str] | None,
    tracer_provider: trace.TracerProvider | None,
) -> AbstractContextManager[Span]:
    tracer = _TRACER if tracer_provider is None else get_tracer(tracer_provider)
    return tracer.start_as_current_span(
        name,
        context=context_from_carrier(trace_context),
        kind=SpanKind.INTERNAL,
        attributes=attributes,
    )
