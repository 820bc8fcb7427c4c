"""ContinueAsNew's routing overrides in the store (on every backend): the new run gets
the other task queue and/or workflow type and version, the old run's event records them,
and a version without a type is refused."""

from __future__ import annotations

import pytest

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import NS, claim, events, history, start


def continue_as_new(**overrides: str) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        continue_as_new=workflow_task_pb2.ContinueAsNew(
            input=payload_pb2.Payload(data=b"[2]"), **overrides
        )
    )


async def test_the_new_run_takes_the_overridden_queue_type_and_version(store: Store) -> None:
    old_run = await start(store)
    task = await claim(store)
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [continue_as_new(task_queue="q2", workflow_type="Invoice", workflow_version="3")],
    )
    event = events(await history(store, run_id=old_run))[-1].workflow_continued_as_new
    assert (event.task_queue, event.workflow_type, event.workflow_version) == (
        "q2",
        "Invoice",
        "3",
    )
    new = await store.describe(NS, "wf-1", None)
    assert new.info.run_id == event.new_run_id
    assert (new.info.workflow_type, new.info.workflow_version, new.info.task_queue) == (
        "Invoice",
        "3",
        "q2",
    )
    assert await store.claim_workflow_task(NS, "q1", "w1", 30_000) is None
    moved = await store.claim_workflow_task(NS, "q2", "w2", 30_000)
    assert moved is not None and moved.run_id == event.new_run_id
    started = events(moved.events)[0].workflow_started
    assert (started.workflow_type, started.task_queue) == ("Invoice", "q2")


async def test_without_overrides_the_new_run_keeps_type_version_and_queue(
    store: Store,
) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [continue_as_new()])
    new = await store.describe(NS, "wf-1", None)
    assert (new.info.workflow_type, new.info.workflow_version, new.info.task_queue) == (
        "Order",
        "1",
        "q1",
    )


async def test_a_version_without_a_type_is_refused(store: Store) -> None:
    await start(store)
    task = await claim(store)
    with pytest.raises(InvalidArgumentError, match=r"workflow_version .* workflow_type"):
        await store.complete_workflow_task(
            NS, task.lease, len(task.events), [continue_as_new(workflow_version="2")]
        )
