"""Build-id pinning: the first decision pins a run to the deciding worker's build.

A worker of another build, a worker without a build and an unregistered worker id never
take a pinned run's workflow tasks (polls, eager claims) nor decide it inline; a run
first decided by an unversioned worker stays unversioned; continue-as-new keeps a pin.
On PostgreSQL the first decisions here go through the hot path's function.
"""

from __future__ import annotations

from durable_rpc.store import (
    ClaimedWorkflowTask,
    EagerActivities,
    EagerWorkflowTask,
    InlineWorkflowTask,
    Store,
)
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import NS, QUEUE, claim, complete, payload, schedule, start


async def register(store: Store, worker: str, build: str) -> None:
    await store.register_worker(NS, worker, QUEUE, [("Order", "1", "fp-1")], ["act"], build, False)


async def decide(
    store: Store, task: ClaimedWorkflowTask, *commands: workflow_task_pb2.Command
) -> None:
    """Completes ``task``; naming the run's queue (eager dispatch of nothing) makes a
    decision that schedules activities PostgreSQL's hot-path function call."""
    eager = EagerActivities(QUEUE, frozenset({"act"}), 0)
    await store.complete_workflow_task(
        NS, task.lease, len(task.events), list(commands), eager=eager
    )


async def pin_to_a(store: Store) -> str:
    """Starts wf-1 and lets build A's worker decide it (schedules activity 1)."""
    await register(store, "a1", "build-a")
    await register(store, "b1", "build-b")
    await register(store, "plain", "")
    run_id = await start(store)
    task = await claim(store, "a1")
    await decide(store, task, schedule(1))
    return run_id


async def finish_activity(store: Store, worker: str = "b1") -> None:
    activity = await store.claim_activity_task(NS, QUEUE, worker, ["act"])
    assert activity is not None
    await store.complete_activity_task(NS, activity.lease, payload(b"r"))


async def test_first_decision_pins_the_run_to_the_workers_build(store: Store) -> None:
    run_id = await pin_to_a(store)
    assert (await store.describe(NS, "wf-1", None)).build_id == "build-a"
    # The activity is not pinned (any worker runs it); the workflow task it queues is.
    await finish_activity(store, "b1")
    for other in ("b1", "plain", "raw-client"):
        assert await store.claim_workflow_task(NS, QUEUE, other, 30_000) is None, other
    task = await claim(store, "a1")
    assert task.run_id == run_id


async def test_a_run_first_decided_without_a_build_stays_unversioned(store: Store) -> None:
    await register(store, "plain", "")
    await register(store, "b1", "build-b")
    await start(store)
    task = await claim(store, "plain")
    await decide(store, task, schedule(1))
    assert (await store.describe(NS, "wf-1", None)).build_id == ""
    await finish_activity(store, "plain")
    # A versioned worker takes it and decides, and the run still is not pinned.
    task = await claim(store, "b1")
    await decide(store, task, schedule(2))
    assert (await store.describe(NS, "wf-1", None)).build_id == ""
    await finish_activity(store, "b1")
    assert (await claim(store, "plain")).attempt == 1


async def test_an_undecided_run_goes_to_any_build(store: Store) -> None:
    await register(store, "a1", "build-a")
    await register(store, "b1", "build-b")
    await start(store)
    assert (await store.describe(NS, "wf-1", None)).build_id == ""
    task = await claim(store, "b1")
    await decide(store, task, schedule(1))
    assert (await store.describe(NS, "wf-1", None)).build_id == "build-b"


async def test_an_eager_workflow_task_of_a_pinned_run_is_not_claimed_by_another_build(
    store: Store,
) -> None:
    await pin_to_a(store)
    activity = await store.claim_activity_task(NS, QUEUE, "b1", ["act"])
    assert activity is not None
    claimed = await store.complete_activity_task(
        NS, activity.lease, payload(b"r"), EagerWorkflowTask(QUEUE, 30_000)
    )
    assert claimed is None
    assert (await claim(store, "a1")).attempt == 1


async def test_another_build_cannot_decide_a_pinned_run_inline(store: Store) -> None:
    run_id = await pin_to_a(store)
    length = (await store.describe(NS, "wf-1", None)).info.history_length
    activity = await store.claim_activity_task(NS, QUEUE, "b1", ["act"])
    assert activity is not None
    inline = InlineWorkflowTask(run_id, length, [complete(2)], build_id="build-b")
    done = await store.complete_activity_task_inline(
        NS, activity.lease, payload(b"r"), inline=inline
    )
    assert done.inline is None
    assert (await store.describe(NS, "wf-1", None)).info.status == "running"
    # Build A's worker decides it, inline too.
    task = await claim(store, "a1")
    await decide(store, task, schedule(2))
    activity = await store.claim_activity_task(NS, QUEUE, "a1", ["act"])
    assert activity is not None
    length = (await store.describe(NS, "wf-1", None)).info.history_length
    inline = InlineWorkflowTask(run_id, length, [complete(3)], build_id="build-a")
    done = await store.complete_activity_task_inline(
        NS, activity.lease, payload(b"r"), inline=inline
    )
    assert done.inline is not None
    assert (await store.describe(NS, "wf-1", None)).info.status == "completed"


async def test_a_workflow_task_queued_during_the_first_lease_is_pinned(store: Store) -> None:
    await register(store, "a1", "build-a")
    await register(store, "b1", "build-b")
    await start(store)
    task = await claim(store, "a1")
    # A signal during the first task queues the run's next workflow task, unpinned yet.
    assert await store.signal_workflow(NS, "wf-1", None, "go", payload(b"s"), "sig-1")
    await store.complete_workflow_task(NS, task.lease, len(task.events), [])
    assert await store.claim_workflow_task(NS, QUEUE, "b1", 30_000) is None
    assert (await claim(store, "a1")).run_id == task.run_id


async def test_continue_as_new_keeps_the_pin(store: Store) -> None:
    await register(store, "a1", "build-a")
    await register(store, "b1", "build-b")
    first_run = await start(store)
    task = await claim(store, "a1")
    # The run's first decision continues it: the pin it records goes to the new run.
    again = workflow_task_pb2.Command(
        seq=1,
        continue_as_new=workflow_task_pb2.ContinueAsNew(input=payload_pb2.Payload(data=b"n")),
    )
    await store.complete_workflow_task(NS, task.lease, len(task.events), [again])
    description = await store.describe(NS, "wf-1", None)
    assert description.info.run_id != first_run
    assert description.build_id == "build-a"
    assert await store.claim_workflow_task(NS, QUEUE, "b1", 30_000) is None
    assert (await claim(store, "a1")).run_id == description.info.run_id


async def test_continue_as_new_of_an_unversioned_run_is_undecided(store: Store) -> None:
    await register(store, "plain", "")
    await register(store, "b1", "build-b")
    await start(store)
    task = await claim(store, "plain")
    again = workflow_task_pb2.Command(
        seq=1,
        continue_as_new=workflow_task_pb2.ContinueAsNew(input=payload_pb2.Payload(data=b"n")),
    )
    await store.complete_workflow_task(NS, task.lease, len(task.events), [again])
    # The new run is decided afresh: build B's worker takes it and pins it.
    task = await claim(store, "b1")
    await decide(store, task, schedule(1))
    assert (await store.describe(NS, "wf-1", None)).build_id == "build-b"


async def test_a_pinned_runs_query_goes_only_to_a_worker_of_its_build(store: Store) -> None:
    run_id = await pin_to_a(store)
    await store.submit_query(NS, QUEUE, "q-1", ("Order", "1"), b"query", 60_000, run_id=run_id)
    for other in ("b1", "plain", "raw-client"):
        assert await store.take_query(NS, QUEUE, [], worker_id=other) is None, other
    assert await store.take_query(NS, QUEUE, [], worker_id="a1") == b"query"
    # An unpinned run's query (undecided) goes to any worker, as before builds.
    undecided = await start(store, "wf-2")
    await store.submit_query(NS, QUEUE, "q-2", ("Order", "1"), b"q2", 60_000, run_id=undecided)
    assert await store.take_query(NS, QUEUE, [], worker_id="plain") == b"q2"
