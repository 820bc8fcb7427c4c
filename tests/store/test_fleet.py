"""The fleet's reads: workers with their heartbeat counters (ListWorkers) and a task
queue's backlog, pollers and served definitions (DescribeTaskQueue)."""

from __future__ import annotations

import pytest

from durable_rpc.errors import InvalidArgumentError, NamespaceNotFoundError
from durable_rpc.store import Store, StoreOptions, WorkerCounters
from tests.store.conftest import Backend
from tests.store.helpers import (
    NS,
    QUEUE,
    activity_options,
    claim,
    failure,
    schedule,
    start,
    wait_db_time,
)

COUNTS = WorkerCounters(
    claims=7, completions=5, failures=1, lease_losses=1, slots_in_use=2, slots_total=9
)


async def register(
    store: Store,
    worker: str,
    queue: str = QUEUE,
    build: str = "",
    definitions: tuple[tuple[str, str, str], ...] = (("Order", "1", "fp-1"),),
) -> None:
    await store.register_worker(NS, worker, queue, definitions, ["charge"], build, False)


async def test_heartbeat_counters_are_what_list_workers_shows(store: Store) -> None:
    await register(store, "w2", build="b-1")
    await register(
        store, "w1", build="b-1", definitions=(("Order", "1", "fp-1"), ("Ship", "2", "fp-s"))
    )
    await register(store, "w0", queue="other")
    before = await store.list_workers(NS, None, include_dead=False)
    assert [(w.task_queue, w.worker_id) for w in before] == [
        ("other", "w0"),
        (QUEUE, "w1"),
        (QUEUE, "w2"),
    ]
    assert before[1].counters == WorkerCounters()  # nothing reported yet
    await store.worker_heartbeat(NS, "w1", COUNTS)
    (w1, w2) = await store.list_workers(NS, QUEUE, include_dead=False)
    assert w1.counters == COUNTS
    assert w2.counters == WorkerCounters()
    assert (w1.build_id, w1.live, w1.activities) == ("b-1", True, ("charge",))
    assert w1.definitions == (("Order", "1", "fp-1"), ("Ship", "2", "fp-s"))
    assert w1.registered_at_ms <= w1.last_heartbeat_ms <= await store.now_ms()
    # A heartbeat without counters (a worker that counts nothing) keeps the last report.
    await store.worker_heartbeat(NS, "w1")
    assert (await store.list_workers(NS, QUEUE, include_dead=False))[0].counters == COUNTS
    with pytest.raises(InvalidArgumentError, match=r"counters\.failures must not be negative"):
        await store.worker_heartbeat(NS, "w1", WorkerCounters(failures=-1))
    with pytest.raises(NamespaceNotFoundError):
        await store.list_workers("nope", None, include_dead=True)
    # A worker id registered again (a restarted process) starts from zero until it reports.
    await register(store, "w1", build="b-1")
    assert (await store.list_workers(NS, QUEUE, include_dead=False))[0].counters == (
        WorkerCounters()
    )


async def test_dead_workers_are_listed_only_when_asked(backend: Backend) -> None:
    # A window far longer than one call takes on a loaded machine, yet short to wait out.
    store = backend.make(StoreOptions(worker_liveness_ms=1500))
    async with store:
        await register(store, "gone")
        await register(store, "alive")
        # The liveness rule is describe's (the database clock): a heartbeat older than
        # the window is dead. Wait out the window on that clock, then keep "alive" live.
        await wait_db_time(store, await store.now_ms() + 1550)
        await store.worker_heartbeat(NS, "alive")
        live = await store.list_workers(NS, None, include_dead=False)
        assert [w.worker_id for w in live] == ["alive"]
        every = await store.list_workers(NS, None, include_dead=True)
        assert [(w.worker_id, w.live) for w in every] == [("alive", True), ("gone", False)]
        queue = await store.describe_task_queue(NS, QUEUE)
        assert [p.worker_id for p in queue.pollers] == ["alive"]
        await store.deregister_worker(NS, "gone")
        assert len(await store.list_workers(NS, None, include_dead=True)) == 1


async def test_list_workers_of_many_workers_carries_each_ones_definitions(store: Store) -> None:
    for i in range(120):
        await register(
            store, f"w{i:03}", definitions=(("Order", "1", "fp-1"), (f"D{i}", "1", f"fp{i}"))
        )
    workers = await store.list_workers(NS, QUEUE, include_dead=False)
    assert len(workers) == 120
    for i, worker in enumerate(workers):
        assert worker.worker_id == f"w{i:03}"
        assert worker.definitions == (("D" + str(i), "1", f"fp{i}"), ("Order", "1", "fp-1"))


async def test_task_queue_backlog_by_kind_and_state(backend: Backend) -> None:
    store = backend.make(
        StoreOptions(workflow_task_initial_backoff_ms=60_000, workflow_task_max_backoff_ms=60_000)
    )
    async with store:
        empty = await store.describe_task_queue(NS, QUEUE)
        assert [(b.kind, b.queued, b.leased, b.waiting, b.recoverable) for b in empty.backlog] == [
            ("workflow", 0, 0, 0, 0),
            ("activity", 0, 0, 0, 0),
        ]
        assert empty.backlog[0].oldest_queued_at_ms is None
        for i in range(5):
            await start(store, f"wf-{i}")
        await start(store, "elsewhere", queue="other")
        oldest = (await store.describe_task_queue(NS, QUEUE)).backlog[0].oldest_queued_at_ms
        # wf-0: leased; wf-1: lease expired (recoverable); wf-2: failed (backoff: waiting);
        # wf-3: an activity scheduled (queued), the other activity of wf-3 leased.
        await claim(store, lease_ms=60_000)
        expired = await claim(store, lease_ms=1)
        failing = await claim(store)
        await store.fail_workflow_task(NS, failing.lease, failure())
        scheduling = await claim(store)
        await store.complete_workflow_task(
            NS,
            scheduling.lease,
            scheduling.history_length,
            [schedule(1, "charge", activity_options()), schedule(2, "charge")],
        )
        assert await store.claim_activity_task(NS, QUEUE, "aw", ["charge"]) is not None
        queue = await store.describe_task_queue(NS, QUEUE)
        while queue.now_ms < expired.lease_expires_at_ms:
            queue = await store.describe_task_queue(NS, QUEUE)
        workflow, activity = queue.backlog
        assert (workflow.queued, workflow.leased, workflow.waiting, workflow.recoverable) == (
            1,  # wf-4
            1,
            1,
            1,
        )
        assert (activity.queued, activity.leased, activity.waiting, activity.recoverable) == (
            1,
            1,
            0,
            0,
        )
        # wf-0 .. wf-3 left the queue: the oldest queued is wf-4's, queued after wf-0's.
        assert oldest is not None and workflow.oldest_queued_at_ms is not None
        assert oldest <= workflow.oldest_queued_at_ms <= queue.now_ms
        assert activity.oldest_queued_at_ms is not None
        assert activity.oldest_queued_at_ms <= queue.now_ms
        with pytest.raises(InvalidArgumentError):
            await store.describe_task_queue(NS, "")


async def test_task_queue_pollers_and_the_definitions_they_serve(store: Store) -> None:
    await register(store, "a", build="b-2")
    await register(store, "b", build="b-1")
    await register(store, "c", definitions=(("Order", "1", "fp-1"), ("Ship", "1", "fp-s")))
    await register(store, "d", queue="other", build="b-9")
    await store.worker_heartbeat(NS, "a", COUNTS)
    queue = await store.describe_task_queue(NS, QUEUE)
    assert [(p.worker_id, p.build_id) for p in queue.pollers] == [
        ("a", "b-2"),
        ("b", "b-1"),
        ("c", ""),
    ]
    assert (queue.pollers[0].counters.slots_in_use, queue.pollers[0].counters.slots_total) == (
        2,
        9,
    )
    assert [
        (d.name, d.version, d.fingerprint, d.build_ids, d.live_workers) for d in queue.definitions
    ] == [
        ("Order", "1", "fp-1", ("", "b-1", "b-2"), 3),
        ("Ship", "1", "fp-s", ("",), 1),
    ]


async def test_list_task_queues_names_each_queue_with_tasks_or_workers(store: Store) -> None:
    assert await store.list_task_queues(NS) == ([], False)
    await register(store, "a")  # QUEUE: a live worker, nothing open
    await register(store, "idle", queue="idle-q")
    for i in range(3):
        await start(store, f"wf-{i}", queue="backlogged")  # no worker: three queued
    await start(store, "one", queue=QUEUE)
    queues, truncated = await store.list_task_queues(NS)
    assert not truncated
    by_name = {q.task_queue: q for q in queues}
    assert [q.task_queue for q in queues] == sorted(["backlogged", "idle-q", QUEUE])
    backlogged = by_name["backlogged"]
    assert (backlogged.workflow_queued, backlogged.activity_queued) == (3, 0)
    assert (backlogged.open_tasks, backlogged.workers, backlogged.live_workers) == (3, 0, 0)
    described = await store.describe_task_queue(NS, "backlogged")
    assert backlogged.oldest_queued_at_ms == described.backlog[0].oldest_queued_at_ms
    idle = by_name["idle-q"]
    assert (idle.open_tasks, idle.oldest_queued_at_ms, idle.workers, idle.live_workers) == (
        0,
        None,
        1,
        1,
    )
    # A claimed task is open but no longer queued.
    assert by_name[QUEUE].workflow_queued == 1
    await claim(store, worker="a")
    mine = {q.task_queue: q for q in (await store.list_task_queues(NS))[0]}[QUEUE]
    assert (mine.workflow_queued, mine.open_tasks, mine.live_workers) == (0, 1, 1)
    first, more = await store.list_task_queues(NS, limit=2)
    assert [q.task_queue for q in first] == [q.task_queue for q in queues[:2]] and more
    with pytest.raises(NamespaceNotFoundError):
        await store.list_task_queues("no-such-namespace")
