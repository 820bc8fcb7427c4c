"""Inline workflow tasks through a real server: a worker that keeps a run's history decides
the next workflow task with the activity completion that causes it. The histories are the
ones the ordinary path records, and they replay."""

from __future__ import annotations

from datetime import timedelta

from durable_rpc import StickyCacheOptions, Worker, activity, workflow
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import history_pb2

TIMEOUT = timedelta(seconds=10)


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn(name="InlineSteps")
class InlineSteps:
    @workflow.run
    async def run(self, name: str) -> str:
        first = await workflow.execute_activity(shout, name, start_to_close_timeout=TIMEOUT)
        token = workflow.side_effect(lambda: "fixed")
        second = await workflow.execute_activity(shout, first, start_to_close_timeout=TIMEOUT)
        return f"{first}-{token}-{second}"


@workflow.defn(name="ClockAfterActivity")
class ClockAfterActivity:
    @workflow.run
    async def run(self) -> float:
        await workflow.execute_activity(shout, "x", start_to_close_timeout=TIMEOUT)
        return workflow.now().timestamp()


WORKFLOWS = [InlineSteps, ClockAfterActivity]


def shape(events: list[history_pb2.HistoryEvent]) -> list[tuple[str | None, int]]:
    """Event kinds and each marker's last_seen_event_id: what replay depends on."""
    return [
        (
            e.WhichOneof("attributes"),
            e.workflow_task_completed.last_seen_event_id
            if e.HasField("workflow_task_completed")
            else 0,
        )
        for e in events
    ]


async def run_steps(
    env: WorkflowEnvironment, sticky: int, workflow_id: str
) -> tuple[str, list[history_pb2.HistoryEvent], int]:
    async with Worker(
        env.client,
        task_queue="inline",
        workflows=WORKFLOWS,
        activities=[shout],
        sticky_cache=StickyCacheOptions(max_entries=sticky),
    ) as worker:
        handle = await env.client.start_workflow(
            InlineSteps.run, "go", id=workflow_id, task_queue="inline"
        )
        result = await handle.result(timeout=30)
        events = await handle.history()
    assert worker.report is not None
    return result, events, worker.report.inline_workflow_tasks


async def test_inline_decisions_record_the_ordinary_history() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        inline_result, inline_events, inline_count = await run_steps(env, 1000, "inline")
        plain_result, plain_events, plain_count = await run_steps(env, 0, "plain")
    assert inline_result == plain_result == "GO-fixed-GO"
    # Both workflow tasks after an activity were decided inline; none without the cache.
    assert (inline_count, plain_count) == (2, 0)
    assert shape(inline_events) == shape(plain_events)
    replayer = Replayer(WORKFLOWS)
    for events in (inline_events, plain_events):
        result = replayer.replay(history_pb2.History(events=events))
        assert result.ok, result.error


async def test_code_reading_the_clock_gets_the_ordinary_task() -> None:
    async with (
        await WorkflowEnvironment.start_local() as env,
        Worker(env.client, task_queue="clock", workflows=WORKFLOWS, activities=[shout]) as worker,
    ):
        handle = await env.client.start_workflow(
            ClockAfterActivity.run, id="clock", task_queue="clock"
        )
        seen = await handle.result(timeout=30)
        events = await handle.history()
    assert worker.report is not None and worker.report.inline_workflow_tasks == 0
    # workflow.now() after the activity is the recorded time of the task that saw it.
    markers = [e.workflow_task_completed for e in events if e.HasField("workflow_task_completed")]
    assert seen == markers[-1].workflow_time.ToMilliseconds() / 1000
    assert Replayer(WORKFLOWS).replay(history_pb2.History(events=events)).ok
