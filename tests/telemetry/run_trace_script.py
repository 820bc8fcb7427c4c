"""Runs examples/hello_world.py's workflow (two activities, the second retried once)
through a real server and worker, in a process of its own (the global tracer provider
can be set once per process), and prints every finished span as a JSON line: name,
trace id, span id, parent span id; then a line named ``history`` with the count of the
run's WorkflowTaskCompleted events. With ``--sticky-off`` the worker keeps nothing between
tasks, so every workflow task replays the run's history from event 1."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from durable_rpc import StickyCacheOptions, Worker
from durable_rpc.testing import WorkflowEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from hello_world import HelloWorkflow, say_goodbye, say_hello


async def main() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    async with (
        await WorkflowEnvironment.start_local() as env,
        Worker(
            env.client,
            task_queue="traced",
            workflows=[HelloWorkflow],
            activities=[say_hello, say_goodbye],
            sticky_cache=StickyCacheOptions(max_entries=0 if "--sticky-off" in sys.argv else 1000),
        ),
    ):
        with trace.get_tracer("test").start_as_current_span("caller"):
            handle = await env.client.start_workflow(
                HelloWorkflow.run, "x", id="traced-1", task_queue="traced"
            )
        assert await handle.result() == "Hello, x! Goodbye, x!"
        history = await handle.history()
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        assert context is not None
        print(
            json.dumps(
                {
                    "name": span.name,
                    "trace": context.trace_id,
                    "id": context.span_id,
                    "parent": span.parent.span_id if span.parent is not None else None,
                }
            )
        )
    completed = sum(1 for e in history if e.HasField("workflow_task_completed"))
    print(json.dumps({"name": "history", "workflow_tasks_completed": completed}))


if __name__ == "__main__":
    asyncio.run(main())
