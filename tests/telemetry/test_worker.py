"""Worker span helpers: parented on the trace context carried through history."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from durable_rpc.telemetry import activity_span, current_trace_context, workflow_task_span
from tests.telemetry.conftest import Spans


def test_a_run_is_one_trace_through_carried_contexts(spans: Spans) -> None:
    tracer = spans.provider.get_tracer("test")
    # Server side: StartWorkflow runs inside the RPC span; its context goes into history.
    with tracer.start_as_current_span("StartWorkflow") as start:
        started_event_context = current_trace_context()
    assert set(started_event_context) == {"traceparent"}

    # Worker side, later and with nothing current: the workflow task parents on history.
    with workflow_task_span(
        "Order", "order-1", "run-1", 1, started_event_context, tracer_provider=spans.provider
    ):
        scheduled_activity_context = current_trace_context()
    with activity_span(
        "Charge", "order-1", "run-1", 2, scheduled_activity_context, tracer_provider=spans.provider
    ):
        pass

    task = spans.named("RunWorkflowTask:Order")
    act = spans.named("RunActivity:Charge")
    trace_id = start.get_span_context().trace_id
    assert task.context.trace_id == act.context.trace_id == trace_id
    assert task.parent is not None and task.parent.is_remote
    assert task.parent.span_id == start.get_span_context().span_id
    assert act.parent is not None and act.parent.span_id == task.context.span_id
    assert task.kind is act.kind is SpanKind.INTERNAL
    assert dict(task.attributes or {}) == {
        "durable_rpc.workflow_type": "Order",
        "durable_rpc.workflow_id": "order-1",
        "durable_rpc.run_id": "run-1",
        "durable_rpc.attempt": 1,
    }
    assert dict(act.attributes or {}) == {
        "durable_rpc.activity_type": "Charge",
        "durable_rpc.workflow_id": "order-1",
        "durable_rpc.run_id": "run-1",
        "durable_rpc.attempt": 2,
    }


def test_carried_context_wins_over_the_current_span(spans: Spans) -> None:
    tracer = spans.provider.get_tracer("test")
    with tracer.start_as_current_span("origin") as origin:
        carried = current_trace_context()
    with (
        tracer.start_as_current_span("poll-loop"),
        workflow_task_span("W", "w", "r", 1, carried, tracer_provider=spans.provider),
    ):
        pass
    task = spans.named("RunWorkflowTask:W")
    assert task.parent is not None
    assert task.parent.span_id == origin.get_span_context().span_id


@pytest.mark.parametrize("carried", [None, {}])
def test_without_carried_context_uses_the_current_one(
    spans: Spans, carried: dict[str, str] | None
) -> None:
    with activity_span("A", "w", "r", 1, carried, tracer_provider=spans.provider):
        pass
    assert spans.named("RunActivity:A").parent is None  # a new root

    tracer = spans.provider.get_tracer("test")
    with (
        tracer.start_as_current_span("outer") as outer,
        workflow_task_span("W", "w", "r", 1, carried, tracer_provider=spans.provider),
    ):
        pass
    task = spans.named("RunWorkflowTask:W")
    assert task.parent is not None
    assert task.parent.span_id == outer.get_span_context().span_id


def test_exception_is_recorded_and_propagates(spans: Spans) -> None:
    with (
        pytest.raises(ValueError, match="bad input"),
        activity_span("A", "w", "r", 3, None, tracer_provider=spans.provider),
    ):
        raise ValueError("bad input")
    span = spans.named("RunActivity:A")
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_no_sdk_configured_is_a_no_op_that_keeps_the_carried_context() -> None:
    carried = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    with workflow_task_span("W", "w", "r", 1, carried) as span:
        assert not span.is_recording()
        assert current_trace_context() == carried
    assert current_trace_context() == {}


def test_activity_attempts_join_the_run_trace_under_the_task_that_scheduled_them() -> None:
    # A real server and worker in a fresh process (one global tracer provider per process).
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("run_trace_script.py"))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    spans = [json.loads(line) for line in done.stdout.splitlines()]
    caller = next(s for s in spans if s["name"] == "caller")
    tasks = {s["id"]: s for s in spans if s["name"] == "RunWorkflowTask:HelloWorkflow"}
    activities = [s for s in spans if s["name"].startswith("RunActivity:")]
    assert sorted(s["name"] for s in activities) == [
        "RunActivity:say_goodbye",  # its first attempt fails, the retry succeeds
        "RunActivity:say_goodbye",
        "RunActivity:say_hello",
    ]
    # One trace from the caller's span through every task and attempt of the run...
    assert {s["trace"] for s in [*tasks.values(), *activities]} == {caller["trace"]}
    # ...each attempt a child of the workflow task (live or inline) that scheduled it.
    for attempt in activities:
        assert attempt["parent"] in tasks, (attempt, list(tasks))


def test_replayed_history_emits_no_span_again() -> None:
    # Sticky cache off: each of the run's workflow tasks replays its history from event 1
    # (the earlier tasks' activities, the failed attempt, the timers of the retry).
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("run_trace_script.py")), "--sticky-off"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    [history] = [s for s in lines if s["name"] == "history"]
    spans = [s for s in lines if s["name"] != "history"]
    names = [s["name"] for s in spans]
    # One span per real execution: each workflow task once, each activity attempt once,
    # however many times the replays went over them.
    assert history["workflow_tasks_completed"] >= 3
    assert names.count("RunWorkflowTask:HelloWorkflow") == history["workflow_tasks_completed"]
    assert sorted(n for n in names if n.startswith("RunActivity:")) == [
        "RunActivity:say_goodbye",
        "RunActivity:say_goodbye",
        "RunActivity:say_hello",
    ]
    # The whole run is one trace, the caller's.
    caller = next(s for s in spans if s["name"] == "caller")
    run_spans = [s for s in spans if s["name"].startswith(("RunWorkflowTask:", "RunActivity:"))]
    assert {s["trace"] for s in run_spans} == {caller["trace"]}
