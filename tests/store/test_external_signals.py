"""Signals sent by a decision to other runs (or its own), and the order of a decision's
events: its command events first, then the inputs they caused (on every backend)."""

from __future__ import annotations

from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import NS, claim, complete, events, history, kinds, start


def signal(seq: int, workflow_id: str, run_id: str = "") -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        signal_external_workflow=workflow_task_pb2.SignalExternalWorkflow(
            workflow_id=workflow_id,
            run_id=run_id,
            signal_name="poke",
            input=payload_pb2.Payload(data=b'["hi"]'),
        ),
    )


async def test_signals_reach_open_runs_and_fail_typed_otherwise(store: Store) -> None:
    target = await start(store, "target")
    closed = await start(store, "closed")
    sender = await start(store, "sender")
    tasks = {t.run_id: t for t in [await claim(store) for _ in range(3)]}
    # First tasks: "closed" completes, "target" waits; "sender" sends the signals.
    for run_id, done in ((closed, [complete(1)]), (target, [])):
        first = tasks[run_id]
        await store.complete_workflow_task(NS, first.lease, len(first.events), done)
    task = tasks[sender]
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [signal(1, "target"), signal(2, "closed"), signal(3, "ghost"), signal(4, "sender")],
    )
    sent = await history(store, "sender")
    assert (
        kinds(sent)[-9:]
        == [
            "workflow_task_completed",
            "external_signal_initiated",
            "external_signal_initiated",
            "external_signal_initiated",
            "external_signal_initiated",
            # Inputs after every command event; the signal to itself is one of them.
            "external_signal_delivered",
            "external_signal_failed",
            "external_signal_failed",
            "signal_received",
            "external_signal_delivered",
        ][-9:]
    )
    failed = [
        e.external_signal_failed for e in events(sent) if e.HasField("external_signal_failed")
    ]
    assert [(f.seq, f.reason) for f in failed] == [(2, "WORKFLOW_NOT_RUNNING"), (3, "NOT_FOUND")]
    delivered = [
        e.external_signal_delivered for e in events(sent) if e.HasField("external_signal_delivered")
    ]
    assert [(d.seq, d.run_id) for d in delivered] == [(1, target), (4, sender)]
    received = events(await history(store, "target"))[-1].signal_received
    assert (received.signal_name, received.request_id) == ("poke", f"{sender}/1")
    # The inputs queue the sender's next task; the target got one for its signal.
    assert {(await claim(store)).run_id, (await claim(store)).run_id} == {sender, target}
