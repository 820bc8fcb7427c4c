"""Declared signals on every backend: a run accepts only the signal names its pinned
definition declared; an undeclared one is refused with SIGNAL_NOT_DECLARED (and leaves
nothing behind) instead of being buffered unread."""

from __future__ import annotations

import pytest

from durable_rpc.errors import SignalNotDeclaredError
from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import NS, QUEUE, claim, events, history, kinds, payload, start


async def register(store: Store, signals: list[str] | None, fingerprint: str = "fp-1") -> None:
    await store.register_worker(
        NS,
        "w1",
        QUEUE,
        [("Order", "1", fingerprint)],
        [],
        "",
        True,
        declared_signals=None if signals is None else {("Order", "1"): signals},
    )


async def signal(store: Store, workflow_id: str, name: str, request_id: str) -> bool:
    return await store.signal_workflow(NS, workflow_id, None, name, payload(b"[1]"), request_id)


async def test_an_undeclared_signal_is_refused_naming_the_declared_ones(store: Store) -> None:
    await register(store, ["approve", "cancel"])
    await start(store, "wf-1")
    with pytest.raises(SignalNotDeclaredError) as caught:
        await signal(store, "wf-1", "aprove", "s-1")
    assert caught.value.reason == "SIGNAL_NOT_DECLARED"
    assert "'aprove'" in caught.value.message
    assert "'approve', 'cancel'" in caught.value.message
    assert "signal_received" not in kinds(await history(store, "wf-1"))
    assert await signal(store, "wf-1", "approve", "s-2") is True
    received = events(await history(store, "wf-1"))[-1].signal_received
    assert received.signal_name == "approve"


async def test_undeclared_definitions_and_runs_before_registration_accept_any_name(
    store: Store,
) -> None:
    await start(store, "before")  # no definition registered yet: pinned to no code
    await register(store, ["approve"])
    assert await signal(store, "before", "anything", "s-1") is True
    await register(store, None)  # a worker from before declarations: no set
    await start(store, "undeclared")
    assert await signal(store, "undeclared", "anything", "s-2") is True


async def test_a_run_keeps_the_set_of_the_code_it_started_with(store: Store) -> None:
    await register(store, ["approve"], fingerprint="fp-1")
    await start(store, "old")
    # New code under an operator override: the old run's pinned code has no set now,
    # so it accepts any name rather than be judged by code it does not run.
    await register(store, ["reject"], fingerprint="fp-2")
    await start(store, "new")
    assert await signal(store, "old", "approve", "s-1") is True
    with pytest.raises(SignalNotDeclaredError):
        await signal(store, "new", "approve", "s-2")
    assert await signal(store, "new", "reject", "s-3") is True


async def test_signal_with_start_is_checked_on_both_branches(store: Store) -> None:
    await register(store, ["approve"])

    async def signal_with_start(name: str, request_id: str) -> str:
        result = await store.signal_with_start(
            NS, "wf-sws", "Order", "1", QUEUE, payload(b"[]"), name, payload(b"[]"), request_id
        )
        return result.run_id

    # Starting: the refusal rolls the start back too.
    with pytest.raises(SignalNotDeclaredError):
        await signal_with_start("nope", "r-1")
    with pytest.raises(Exception, match="not found"):
        await history(store, "wf-sws")
    run_id = await signal_with_start("approve", "r-2")
    # The open run: refused again, delivered when declared.
    with pytest.raises(SignalNotDeclaredError):
        await signal_with_start("nope", "r-3")
    assert await signal_with_start("approve", "r-4") == run_id
    received = [e.signal_received.signal_name for e in events(await history(store, "wf-sws"))]
    assert received.count("approve") == 2


async def test_a_workflow_signal_to_an_undeclared_name_fails_typed(store: Store) -> None:
    await register(store, ["approve"])
    await start(store, "target")
    sender_run = await start(store, "sender", workflow_type="Sender")
    # w2 never registered: it is served every definition (w1 only Order's).
    tasks = {t.run_id: t for t in [await claim(store, "w2") for _ in range(2)]}
    sender = tasks[sender_run]

    def to_target(seq: int, name: str) -> workflow_task_pb2.Command:
        return workflow_task_pb2.Command(
            seq=seq,
            signal_external_workflow=workflow_task_pb2.SignalExternalWorkflow(
                workflow_id="target", signal_name=name, input=payload_pb2.Payload(data=b"[]")
            ),
        )

    await store.complete_workflow_task(
        NS, sender.lease, len(sender.events), [to_target(1, "nope"), to_target(2, "approve")]
    )
    sent = events(await history(store, "sender"))
    failed = [e.external_signal_failed for e in sent if e.HasField("external_signal_failed")]
    assert [(f.seq, f.reason) for f in failed] == [(1, "SIGNAL_NOT_DECLARED")]
    assert "'nope'" in failed[0].message and "'approve'" in failed[0].message
    delivered = [
        e.external_signal_delivered.seq for e in sent if e.HasField("external_signal_delivered")
    ]
    assert delivered == [2]
    names = [e.signal_received.signal_name for e in events(await history(store, "target"))]
    assert [n for n in names if n] == ["approve"]
