"""A child run started by a decision gets the start options and the trace context its
StartChildWorkflow command carried (on every backend)."""

from __future__ import annotations

from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2, search_attributes_pb2, workflow_task_pb2
from tests.store.helpers import NS, claim, events, history, start

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


async def test_a_child_run_gets_its_start_options_and_trace_context(store: Store) -> None:
    await start(store, "parent")
    task = await claim(store)
    spec = workflow_task_pb2.StartChildWorkflow(
        workflow_type="Kid",
        workflow_id="kid",
        input=payload_pb2.Payload(data=b"[]"),
        memo=search_attributes_pb2.Memo(fields={"from": payload_pb2.Payload(data=b'"p"')}),
        trace_context={"traceparent": TRACEPARENT},
    )
    spec.execution_timeout.FromMilliseconds(60_000)
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [workflow_task_pb2.Command(seq=1, start_child_workflow=spec)],
    )
    started = events(await history(store, "kid"))[0].workflow_started
    assert dict(started.trace_context) == {"traceparent": TRACEPARENT}
    assert started.execution_timeout.ToMilliseconds() == 60_000
    assert started.parent_workflow_id == "parent"
    kid = await store.describe(NS, "kid", None)
    assert kid.info.memo is not None
    assert search_attributes_pb2.Memo.FromString(kid.info.memo) == spec.memo
    assert kid.info.status == "running"
