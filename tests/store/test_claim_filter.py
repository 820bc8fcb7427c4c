"""The claim filter: a worker claims only the workflow tasks of definitions it registered.

Every way a workflow task is claimed (a poll, a start's folded claim, an activity
completion's eager claim) applies it, inside the claiming statement.
"""

from __future__ import annotations

from durable_rpc.store import DirectClaim, EagerWorkflowTask, Store
from tests.store.helpers import NS, QUEUE, payload, schedule


async def start_version(store: Store, workflow_id: str, version: str) -> str:
    result = await store.start_workflow(
        NS, workflow_id, "Orders", version, QUEUE, payload(b"args"), f"req-{workflow_id}"
    )
    return result.run_id


async def register(store: Store, worker: str, *versions: str, activities: list[str]) -> None:
    definitions = [("Orders", version, f"fp-{version}") for version in versions]
    await store.register_worker(NS, worker, QUEUE, definitions, activities, "build", False)


async def test_poll_claims_only_registered_definitions(store: Store) -> None:
    await register(store, "v1-worker", "1", activities=[])
    await register(store, "v2-worker", "2", activities=[])
    # The v2 run's task is the older one: the v1 worker must pass over it.
    v2_run = await start_version(store, "order-v2", "2")
    v1_run = await start_version(store, "order-v1", "1")
    v1_task = await store.claim_workflow_task(NS, QUEUE, "v1-worker", 30_000)
    assert v1_task is not None
    assert (v1_task.run_id, v1_task.workflow_version) == (v1_run, "1")
    assert await store.claim_workflow_task(NS, QUEUE, "v1-worker", 30_000) is None
    v2_task = await store.claim_workflow_task(NS, QUEUE, "v2-worker", 30_000)
    assert v2_task is not None
    assert (v2_task.run_id, v2_task.attempt) == (v2_run, 1)


async def test_run_of_an_unregistered_definition_is_not_claimed(store: Store) -> None:
    await register(store, "v1-worker", "1", activities=[])
    await register(store, "v2-worker", "2", activities=[])
    await start_version(store, "order-v3", "3")
    for worker in ("v1-worker", "v2-worker"):
        assert await store.claim_workflow_task(NS, QUEUE, worker, 30_000) is None
    description = await store.describe(NS, "order-v3", None)
    assert not description.definition_available
    assert description.last_workflow_task_failure is None
    assert description.definition_unavailable_reason == (
        "No live worker on task queue 'q1' registers workflow 'Orders' version '3', so its "
        "workflow tasks are not claimed: start a worker that registers this definition."
    )
    # Once a worker registers it, the run is claimed (its first attempt) and describe
    # has nothing to say.
    await register(store, "v3-worker", "3", activities=[])
    assert (await store.describe(NS, "order-v3", None)).definition_unavailable_reason == ""
    task = await store.claim_workflow_task(NS, QUEUE, "v3-worker", 30_000)
    assert task is not None and task.attempt == 1


async def test_definition_on_another_queue_is_not_available(store: Store) -> None:
    await store.register_worker(
        NS, "elsewhere", "other-queue", [("Orders", "1", "fp-1")], [], "build", False
    )
    await start_version(store, "order-v1", "1")
    description = await store.describe(NS, "order-v1", None)
    assert not description.definition_available
    assert "task queue 'q1'" in description.definition_unavailable_reason


async def test_unregistered_worker_id_is_served_every_definition(store: Store) -> None:
    await register(store, "v1-worker", "1", activities=[])
    run_id = await start_version(store, "order-v2", "2")
    task = await store.claim_workflow_task(NS, QUEUE, "raw-client", 30_000)
    assert task is not None and task.run_id == run_id


async def test_start_folded_claim_respects_the_filter(store: Store) -> None:
    await register(store, "v1-worker", "1", activities=[])
    await register(store, "v2-worker", "2", activities=[])
    started = await store.start_workflow(
        NS,
        "order-v2",
        "Orders",
        "2",
        QUEUE,
        payload(b"args"),
        "req-order-v2",
        claim_for=DirectClaim(worker_id="v1-worker", lease_ms=30_000),
    )
    assert started.started and started.workflow_task is None
    task = await store.claim_workflow_task(NS, QUEUE, "v2-worker", 30_000)
    assert task is not None and task.run_id == started.run_id


async def test_eager_workflow_task_respects_the_filter(store: Store) -> None:
    await register(store, "v2-worker", "2", activities=[])
    await register(store, "activity-worker", activities=["charge"])
    run_id = await start_version(store, "order-v2", "2")
    first = await store.claim_workflow_task(NS, QUEUE, "v2-worker", 30_000)
    assert first is not None
    await store.complete_workflow_task(NS, first.lease, 1, [schedule(1, "charge")])
    activity = await store.claim_activity_task(NS, QUEUE, "activity-worker", ["charge"])
    assert activity is not None
    # The activity worker asks for the run's next workflow task eagerly: it registered no
    # definition, so the task stays queued for the v2 worker.
    completion = await store.complete_activity_task_inline(
        NS,
        activity.lease,
        payload(b"charged"),
        EagerWorkflowTask(task_queue=QUEUE, lease_ms=30_000),
    )
    assert completion.workflow_task is None
    task = await store.claim_workflow_task(NS, QUEUE, "v2-worker", 30_000)
    assert task is not None and task.run_id == run_id


async def test_activity_claims_only_registered_types(store: Store) -> None:
    await register(store, "v1-worker", "1", activities=[])
    await register(store, "charger", activities=["charge"])
    await start_version(store, "order-v1", "1")
    decision = await store.claim_workflow_task(NS, QUEUE, "v1-worker", 30_000)
    assert decision is not None
    await store.complete_workflow_task(
        NS, decision.lease, 1, [schedule(1, "ship"), schedule(2, "charge")]
    )
    # The poll asks for any type (empty filter): the registration still narrows it, so
    # the older "ship" task is passed over.
    claimed = await store.claim_activity_task(NS, QUEUE, "charger", [])
    assert claimed is not None and claimed.activity_type == "charge"
    assert await store.claim_activity_task(NS, QUEUE, "charger", ["ship"]) is None
    # Re-registering replaces the set.
    await register(store, "charger", activities=["ship"])
    shipped = await store.claim_activity_task(NS, QUEUE, "charger", [])
    assert shipped is not None and shipped.activity_type == "ship"
