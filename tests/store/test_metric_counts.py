"""What the store gives the metrics: gauge counts, a claim's queue delay, and the duration
and size of every write transaction, on every backend."""

from __future__ import annotations

import contextlib

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from durable_rpc.errors import DurableRpcError
from durable_rpc.store import Store
from durable_rpc.store._ops_leases import lease_check_at
from tests.store.conftest import Backend
from tests.store.helpers import NS, QUEUE, claim, start, timer, wait_db_time

ORDER = [("Order", "1", "fp-order")]


async def test_counts_waiting_timers_and_runs_no_live_worker_can_take(store: Store) -> None:
    await start(store, "wf-1")
    await start(store, "wf-2")
    counts = await store.metric_counts()
    assert counts.definition_unavailable == {(NS, QUEUE): 2}
    assert dict(counts.waiting) == {}

    await store.register_worker(NS, "w1", QUEUE, ORDER, [], "", False)
    task = await claim(store)
    await store.complete_workflow_task(NS, task.lease, 1, [timer(1, 3_600_000)])
    counts = await store.metric_counts()
    # wf-2's task is claimable by w1 now; wf-1 waits on its timer.
    assert counts.definition_unavailable == {}
    assert dict(counts.waiting) == {"timer": 1}


async def test_a_claim_carries_its_queue_delay_from_visibility(store: Store) -> None:
    await start(store)
    started = await store.now_ms()
    await wait_db_time(store, started + 40)
    task = await claim(store, lease_ms=30)
    assert task.queue_delay_ms >= 40
    # An expired lease makes the task claimable again from the expiry, not from its start:
    # the due pass that finds it expired (on the lease-check grid) requeues it.
    before = await wait_db_time(store, lease_check_at(task.lease_expires_at_ms) + 1)
    await store.process_due()
    again = await claim(store, "w2")
    assert again.attempt == 2
    assert again.queue_delay_ms <= again.workflow_time_ms - before
    # Counted from the start, it would be at least this.
    assert again.queue_delay_ms < again.workflow_time_ms - started - 30


async def test_every_write_transaction_is_recorded(store: Store, backend: Backend) -> None:
    reader = InMemoryMetricReader()
    store.set_meter_provider(MeterProvider(metric_readers=[reader]))
    await start(store, "wf-1")
    await start(store, "wf-2")
    with contextlib.suppress(DurableRpcError):  # a write that fails: wf-1 is open
        await store.start_workflow(NS, "wf-1", "Order", "1", QUEUE, b"", "req-other")
    data = reader.get_metrics_data()
    assert data is not None
    points = {
        (metric.name, point.attributes.get("outcome")): point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
        if point.attributes is not None
    }
    store_name = "postgresql" if backend.name == "postgres" else "sqlite"
    committed = points[("durable_rpc.store_transaction_duration", "committed")]
    assert committed.attributes == {"store": store_name, "outcome": "committed"}
    assert committed.count >= 2 and committed.sum > 0
    operations = points[("durable_rpc.store_operations", "committed")]
    assert operations.value == store.stats.operations - store.stats.failed_operations >= 2
    assert points[("durable_rpc.store_operations", "failed")].value == 1
    failed = points[("durable_rpc.store_transaction_duration", "rolled_back")]
    assert failed.count == 1


async def test_a_pinned_run_counts_as_unavailable_while_only_other_builds_are_live(
    store: Store,
) -> None:
    # The gauge applies the claim's build rule, as describe does: a pinned run's queued
    # workflow task waits for a live worker of its build, whoever else registers it.
    await store.register_worker(NS, "a1", QUEUE, ORDER, [], "build-a", False)
    await start(store, "wf-1")
    task = await claim(store, "a1")
    await store.complete_workflow_task(NS, task.lease, 1, [timer(1, 1)])  # pins to build-a
    await store.deregister_worker(NS, "a1")
    await store.register_worker(NS, "b1", QUEUE, ORDER, [], "build-b", False)
    await wait_db_time(store, await store.now_ms() + 5)
    await store.process_due()  # the timer fires: wf-1's next workflow task is queued
    assert (await store.describe(NS, "wf-1", None)).build_id == "build-a"
    assert (await store.metric_counts()).definition_unavailable == {(NS, QUEUE): 1}
    await store.register_worker(NS, "a2", QUEUE, ORDER, [], "build-a", False)
    assert (await store.metric_counts()).definition_unavailable == {}
