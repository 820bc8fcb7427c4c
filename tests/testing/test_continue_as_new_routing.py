"""workflow.continue_as_new(..., task_queue=..., workflow=...) on the time-skipping
environment (a real server and two workers): the new run goes to the other task queue
and/or the other workflow type, the override is recorded in WorkflowContinuedAsNew, and
an empty override is refused in workflow code (the store's checks:
tests/store/test_continue_as_new_routing.py)."""

from __future__ import annotations

import uuid

import pytest

from durable_rpc import Worker, converter, workflow
from durable_rpc.testing import WorkflowEnvironment
from durable_rpc.v1 import history_pb2
from durable_rpc.worker._workflow_task import replay
from durable_rpc.workflow._definition import definition_of
from tests.testing.test_markers import _started_history

pytestmark = pytest.mark.timeout(60)


@workflow.defn(name="Finisher")
class Finisher:
    @workflow.run
    async def run(self, value: int) -> str:
        info = workflow.info()
        return f"{info.workflow_type} on {info.task_queue}: {value}"


@workflow.defn(name="Hopper")
class Hopper:
    @workflow.run
    async def run(self, value: int, how: str) -> str:
        info = workflow.info()
        if info.task_queue == "other":
            return f"Hopper on other: {value}"
        if how == "queue":
            workflow.continue_as_new(value + 1, how, task_queue="other")
        if how == "type":
            workflow.continue_as_new(value + 1, workflow=Finisher.run)
        if how == "type-name":
            workflow.continue_as_new(value + 1, workflow="Finisher", task_queue="other")
        raise AssertionError(how)


async def run_chain(how: str) -> tuple[str, list[history_pb2.HistoryEvent], str, str]:
    wf_id = f"hop-{uuid.uuid4().hex[:6]}"
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="main", workflows=[Hopper, Finisher]),
        Worker(env.client, task_queue="other", workflows=[Hopper, Finisher]),
    ):
        handle = await env.client.start_workflow(Hopper.run, 1, how, id=wf_id, task_queue="main")
        result = await handle.result(timeout=30)
        first = await handle.history()
        latest = await env.client.get_handle(wf_id).describe()
        return result, first, latest.info.workflow_type, latest.info.task_queue


def continued(events: list[history_pb2.HistoryEvent]) -> history_pb2.WorkflowContinuedAsNew:
    return next(
        e for e in events if e.HasField("workflow_continued_as_new")
    ).workflow_continued_as_new


async def test_continue_as_new_onto_another_task_queue() -> None:
    result, first, workflow_type, task_queue = await run_chain("queue")
    assert result == "Hopper on other: 2"
    assert (workflow_type, task_queue) == ("Hopper", "other")
    event = continued(first)
    assert (event.task_queue, event.workflow_type) == ("other", "")


async def test_continue_as_new_as_another_workflow_type() -> None:
    result, first, workflow_type, task_queue = await run_chain("type")
    assert result == "Finisher on main: 2"
    assert (workflow_type, task_queue) == ("Finisher", "main")
    event = continued(first)
    assert (event.task_queue, event.workflow_type, event.workflow_version) == ("", "Finisher", "1")


async def test_continue_as_new_by_type_name_and_queue() -> None:
    result, _, workflow_type, task_queue = await run_chain("type-name")
    assert result == "Finisher on other: 2"
    assert (workflow_type, task_queue) == ("Finisher", "other")


@workflow.defn(name="BadHop")
class BadHop:
    @workflow.run
    async def run(self, what: str) -> None:
        if what == "queue":
            workflow.continue_as_new(task_queue="")
        workflow.continue_as_new(workflow="")


@pytest.mark.parametrize("what", ["queue", "workflow"])
def test_an_empty_override_fails_in_workflow_code(what: str) -> None:
    definition = definition_of(BadHop)
    history = history_pb2.History.FromString(_started_history(definition.name))
    history.events[0].workflow_started.input.data = converter.encode([what])
    commands = replay(definition, history.SerializeToString(), 0, task_queue="q")
    assert [c.WhichOneof("kind") for c in commands] == ["fail_workflow"]
    failure = commands[0].fail_workflow.failure
    assert failure.type == "ValueError" and "must not be empty" in failure.message
