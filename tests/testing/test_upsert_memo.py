"""workflow.upsert_memo on the time-skipping environment (a real server and worker):
describe shows the merged memo while the run is still open, info().memo follows at once,
the history records MemoUpserted, the Replayer accepts the same code and reports
changed values as a NondeterminismError, and bad keys fail in workflow code."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from durable_rpc import NondeterminismError, Worker, converter, workflow
from durable_rpc.errors import InvalidPayloadError
from durable_rpc.search_attributes import memo_from_proto
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import (
    history_pb2,
    payload_pb2,
    search_attributes_pb2,
    service_pb2,
    workflow_task_pb2,
)
from durable_rpc.worker._workflow_task import replay
from durable_rpc.workflow._definition import definition_of
from tests.testing.test_markers import _started_history

pytestmark = pytest.mark.timeout(60)


@workflow.defn(name="Tagger")
class Tagger:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def finish(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, stage: str) -> dict[str, object]:
        workflow.upsert_memo({"stage": stage, "owner": None, "tries": 1})
        seen = dict(workflow.info().memo)
        await workflow.wait_condition(lambda: self.go)
        workflow.upsert_memo({"tries": 2})
        await workflow.sleep(timedelta(minutes=1))
        return seen


@workflow.defn(name="Tagger")
class TaggerChanged:
    """The same workflow upserting another value: replay must refuse it."""

    @workflow.signal
    def finish(self) -> None:
        pass

    @workflow.run
    async def run(self, stage: str) -> dict[str, object]:
        workflow.upsert_memo({"stage": "other", "owner": None, "tries": 1})
        return {}


async def test_upserted_memo_is_visible_at_once_and_replays() -> None:
    wf_id = f"tag-{uuid.uuid4().hex[:6]}"
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[Tagger]),
    ):
        handle = await env.client.start_workflow(
            Tagger.run, "packing", id=wf_id, task_queue="q", memo={"owner": "ann", "keep": 1}
        )

        # Advancing the skipped clock waits until nothing is queued or running: the first
        # workflow task has completed and the run waits for the signal.
        await env.sleep(timedelta(seconds=1))
        description = await handle.describe()
        assert description.info.status == "running"
        assert description.info.memo == {"keep": 1, "stage": "packing", "tries": 1}
        listed = [r async for r in env.client.list_workflows() if r.workflow_id == wf_id]
        assert [r.memo for r in listed] == [{"keep": 1, "stage": "packing", "tries": 1}]

        await handle.signal(Tagger.finish)
        seen = await handle.result(timeout=30)
        assert seen == {"keep": 1, "stage": "packing", "tries": 1}
        assert (await handle.describe()).info.memo == {"keep": 1, "stage": "packing", "tries": 2}
        history = history_pb2.History(events=await handle.history())
    upserts = [
        memo_from_proto(e.memo_upserted.memo) for e in history.events if e.HasField("memo_upserted")
    ]
    assert upserts == [{"stage": "packing", "owner": None, "tries": 1}, {"tries": 2}]
    assert Replayer([Tagger]).replay(history).ok
    error = Replayer([TaggerChanged], raise_on_failure=False).replay(history).error
    assert isinstance(error, NondeterminismError), error
    assert error.expected.startswith('UpsertMemo("owner"=null, "stage"=')
    assert error.actual.startswith('UpsertMemo("owner"=null, "stage"=')
    assert error.expected != error.actual


@workflow.defn(name="BadMemo")
class BadMemo:
    @workflow.run
    async def run(self, what: str) -> None:
        workflow.upsert_memo({} if what == "empty" else {"": 1})


@pytest.mark.parametrize("what", ["empty", "empty-key"])
def test_bad_memo_upserts_fail_in_workflow_code(what: str) -> None:
    definition = definition_of(BadMemo)
    history = history_pb2.History.FromString(_started_history(definition.name))
    history.events[0].workflow_started.input.data = converter.encode([what])
    commands = replay(definition, history.SerializeToString(), 0, task_queue="q")
    assert [c.WhichOneof("kind") for c in commands] == ["fail_workflow"]
    assert commands[0].fail_workflow.failure.type == "ValueError"


async def test_the_server_refuses_a_memo_value_that_is_no_frame() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        handle = await env.client.start_workflow("Raw", id="raw-1", task_queue="raw")
        stub = env.client.worker_service
        task = await stub.PollWorkflowTask(
            service_pb2.PollWorkflowTaskRequest(
                namespace="default", task_queue="raw", worker_id="w1"
            )
        )
        bad = workflow_task_pb2.Command(
            upsert_memo=workflow_task_pb2.UpsertMemo(
                memo=search_attributes_pb2.Memo(
                    fields={"k": payload_pb2.Payload(data=b"\xc3\x01garbage")}
                )
            )
        )
        with pytest.raises(InvalidPayloadError, match=r"upsert_memo\.memo\['k'\]"):
            await env.client.call(
                stub.CompleteWorkflowTask,
                service_pb2.CompleteWorkflowTaskRequest(
                    namespace="default",
                    lease=service_pb2.Lease(
                        task_id=task.task_id, worker_id="w1", fencing_token=task.fencing_token
                    ),
                    last_seen_event_id=len(task.history.events),
                    commands=[bad],
                ),
            )
        assert (await handle.describe()).info.memo == {}
