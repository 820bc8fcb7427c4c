"""Priority and fairness of claims (``store/_fairness``): a queued task is claimed in
(priority, fairness pass, task id) order, for workflow and activity tasks alike, by a
poll or an eager claim, on every backend; no key: first in, first out within a priority;
keys share a priority fairly."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from durable_rpc.errors import InvalidFairnessKeyError, InvalidPriorityError
from durable_rpc.store import EagerActivities, StartOptions, Store
from durable_rpc.store._fairness import READY, READY_ORDER
from tests.store.conftest import Backend
from tests.store.helpers import NS, QUEUE, claim, payload, schedule


async def _start(
    store: Store, workflow_id: str, priority: int | None = None, key: str | None = None
) -> str:
    result = await store.start_workflow(
        NS,
        workflow_id,
        "Order",
        "1",
        QUEUE,
        payload(b"args"),
        f"req-{workflow_id}",
        options=StartOptions(priority=priority, fairness_key=key),
    )
    return result.run_id


async def _start_many(store: Store, prefix: str, count: int, **kw: object) -> None:
    # A few at a time: a PostgreSQL store runs them on its pool concurrently.
    for first in range(0, count, 50):
        await asyncio.gather(
            *(
                _start(store, f"{prefix}-{i}", **kw)  # type: ignore[arg-type]
                for i in range(first, min(first + 50, count))
            )
        )


async def _schedule_activities(
    store: Store, workflow_id: str, count: int, priority: int | None = None, key: str | None = None
) -> None:
    """A run of ``priority``/``key`` whose first decision schedules ``count`` activities
    (they take the run's priority and key). Its workflow task is claimed by run id: the
    claim order is what the tests look at, so they never rely on it to find the task."""
    run_id = await _start(store, workflow_id, priority, key)
    task = await claim(store)
    assert task.run_id == run_id, "the test's runs are started one at a time"
    await store.complete_workflow_task(
        NS, task.lease, 1, [schedule(seq, "act") for seq in range(1, count + 1)]
    )


async def _activity_run(store: Store, worker: str = "aw") -> tuple[str, int]:
    task = await store.claim_activity_task(NS, QUEUE, worker, [])
    assert task is not None, "expected an activity task"
    return task.workflow_id, task.seq


async def test_a_priority_1_workflow_task_is_claimed_before_a_backlog_of_priority_5(
    store: Store,
) -> None:
    await _start_many(store, "batch", 1_000, priority=5)
    urgent = await _start(store, "urgent", priority=1)
    assert (await claim(store)).run_id == urgent
    assert (await claim(store)).workflow_id.startswith("batch-")
    described = await store.describe(NS, "urgent", None)
    assert (described.priority, described.fairness_key) == (1, "")


async def test_a_priority_1_activity_is_claimed_before_a_backlog_of_priority_5(
    store: Store,
) -> None:
    await _schedule_activities(store, "batch", 1_000, priority=5)
    await _schedule_activities(store, "urgent", 1, priority=1)
    await _schedule_activities(store, "default", 1)
    assert await _activity_run(store) == ("urgent", 1)
    # The default priority (3) is more urgent than 5: the backlog's activities took their
    # run's priority (on PostgreSQL too, where such a run's decisions leave the hot path).
    assert await _activity_run(store) == ("default", 1)
    assert await _activity_run(store) == ("batch", 1)


async def test_first_in_first_out_within_a_priority(store: Store) -> None:
    for i in range(5):
        await _start(store, f"wf-{i}")
    assert [(await claim(store)).workflow_id for _ in range(5)] == [f"wf-{i}" for i in range(5)]
    # Activities: in the order they were scheduled, across runs of the same priority.
    await _schedule_activities(store, "a", 3)
    await _schedule_activities(store, "b", 2)
    claimed = [await _activity_run(store) for _ in range(5)]
    assert claimed == [("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2)]


async def test_a_small_key_is_not_starved_by_another_keys_backlog(store: Store) -> None:
    await _schedule_activities(store, "tenant-a", 1_000, key="A")
    # Some of A's backlog is claimed first: the queue's pass moves on.
    for _ in range(100):
        assert (await _activity_run(store))[0] == "tenant-a"
    await _schedule_activities(store, "tenant-b", 10, key="B")
    order = [(await _activity_run(store))[0] for _ in range(20)]
    assert order.count("tenant-b") == 10, order
    # And they interleave: no run of more than two of A's between B's.
    assert "tenant-a" * 3 not in "".join("A" if w == "tenant-a" else "B" for w in order)


async def test_workflow_tasks_are_shared_fairly_among_keys(store: Store) -> None:
    await _start_many(store, "a", 200, key="A")
    for i in range(10):
        await _start(store, f"b-{i}", key="B")
    order = [(await claim(store)).workflow_id[0] for _ in range(20)]
    assert order.count("b") == 10, order


async def test_an_eager_claim_does_not_jump_a_more_urgent_queued_activity(
    backend: Backend, store: Store
) -> None:
    await _schedule_activities(store, "urgent", 1, priority=1)
    await _start(store, "eager")
    task = await claim(store)
    assert task.workflow_id == "eager"
    eager = EagerActivities(QUEUE, frozenset({"act"}), 3)
    calls = store.stats.hot_calls
    assert await store.complete_workflow_task(NS, task.lease, 1, [schedule(1)], eager=eager) == []
    # PostgreSQL: the hot-path function handed that decision to the general path.
    assert store.stats.hot_calls == calls
    assert await _activity_run(store) == ("urgent", 1)
    assert await _activity_run(store) == ("eager", 1)
    # With nothing more urgent queued, the eager claim takes its activity again (on
    # PostgreSQL in the function: the run has the default priority and no key).
    await _start(store, "eager-2")
    task = await claim(store)
    calls = store.stats.hot_calls
    taken = await store.complete_workflow_task(NS, task.lease, 1, [schedule(1)], eager=eager)
    assert [(t.workflow_id, t.seq) for t in taken] == [("eager-2", 1)]
    assert store.stats.hot_calls == calls + (1 if backend.name == "postgres" else 0)


async def test_describe_shows_the_priority_and_key(store: Store) -> None:
    await _start(store, "parent", priority=2, key="T")
    described = await store.describe(NS, "parent", None)
    assert (described.priority, described.fairness_key) == (2, "T")
    plain = await _start(store, "plain")
    described = await store.describe(NS, "plain", None)
    assert described.info.run_id == plain
    assert (described.priority, described.fairness_key) == (3, "")


async def test_no_key_writes_no_pass_row(backend: Backend, store: Store) -> None:
    if backend.path is None:
        pytest.skip("reads the SQLite file directly")
    await _schedule_activities(store, "plain", 3, priority=2)
    with sqlite3.connect(backend.path) as db:
        assert db.execute("SELECT count(*) FROM fairness_passes").fetchone() == (0,)
    await _schedule_activities(store, "keyed", 2, key="K")
    with sqlite3.connect(backend.path) as db:
        keys = db.execute("SELECT DISTINCT fairness_key FROM fairness_passes").fetchall()
        assert sorted(keys) == [("",), ("K",)] or sorted(keys) == [("K",)]


async def test_claims_read_the_claim_order_index(backend: Backend, store: Store) -> None:
    """The ordered probe is an index scan of tasks_ready, not a sort of the backlog."""
    if backend.path is None:
        pytest.skip("reads the SQLite plan directly")
    await _schedule_activities(store, "batch", 10)
    with sqlite3.connect(backend.path) as db:
        plan = db.execute(
            # The claim's ordered probe, as _ops_activities and _ops_workflow_tasks send it.
            "EXPLAIN QUERY PLAN SELECT task_id FROM tasks t WHERE namespace = ? "
            f"AND kind = 'activity' AND task_queue = ? AND {READY} "
            f"AND (queue_deadline_ms IS NULL OR queue_deadline_ms > ?){READY_ORDER}",
            (NS, QUEUE, 0),
        ).fetchall()
    details = " ".join(str(row[-1]) for row in plan)
    assert "tasks_ready" in details and "TEMP B-TREE" not in details, details


@pytest.mark.parametrize("priority", [0, 6, -1])
async def test_a_priority_out_of_range_is_refused(store: Store, priority: int) -> None:
    with pytest.raises(InvalidPriorityError, match="priority must be 1") as raised:
        await _start(store, "bad", priority=priority)
    assert raised.value.reason == "INVALID_PRIORITY"


async def test_an_overlong_fairness_key_is_refused(store: Store) -> None:
    with pytest.raises(InvalidFairnessKeyError, match="at most 128") as raised:
        await _start(store, "bad", key="k" * 129)
    assert raised.value.reason == "INVALID_FAIRNESS_KEY"
    await _start(store, "ok", key="k" * 128)


async def test_task_queue_describe_counts_the_queued_backlog_by_priority(store: Store) -> None:
    await _schedule_activities(store, "batch", 3, priority=5)
    await _schedule_activities(store, "urgent", 1, priority=1)
    await _start(store, "waiting-wf", priority=2)
    backlog = {b.kind: b for b in (await store.describe_task_queue(NS, QUEUE)).backlog}
    assert backlog["activity"].queued_by_priority == ((1, 1), (5, 3))
    assert backlog["workflow"].queued_by_priority == ((2, 1),)
    await _activity_run(store)
    backlog = {b.kind: b for b in (await store.describe_task_queue(NS, QUEUE)).backlog}
    assert backlog["activity"].queued_by_priority == ((5, 3),)


async def test_an_activitys_own_priority_outranks_its_runs(store: Store) -> None:
    await _schedule_activities(store, "batch", 200)  # the default priority, 3
    await _start(store, "mixed")
    task = await claim(store)
    assert task.workflow_id == "mixed"
    slow, urgent = schedule(1, "act"), schedule(2, "act")
    slow.schedule_activity.options.priority = 5
    urgent.schedule_activity.options.priority = 1
    # One decision, so the eager-claim-free general path and PostgreSQL's function
    # (which must hand it over: its INSERT gives a task its run's priority) both apply.
    await store.complete_workflow_task(NS, task.lease, 1, [slow, urgent])
    assert await _activity_run(store) == ("mixed", 2)
    claimed = [await _activity_run(store) for _ in range(201)]
    assert claimed[:200] == [("batch", seq) for seq in range(1, 201)]
    assert claimed[200] == ("mixed", 1)


@pytest.mark.parametrize("priority", [6, -1])
async def test_an_activity_priority_out_of_range_is_refused(store: Store, priority: int) -> None:
    await _start(store, "bad")
    task = await claim(store)
    command = schedule(1, "act")
    command.schedule_activity.options.priority = priority
    with pytest.raises(InvalidPriorityError, match="command seq 1: priority must be 1") as raised:
        await store.complete_workflow_task(NS, task.lease, 1, [command])
    assert raised.value.reason == "INVALID_PRIORITY"


async def test_an_eager_claim_honours_the_activitys_own_priority(store: Store) -> None:
    await _schedule_activities(store, "queued", 1)  # the default priority, 3
    await _start(store, "eager")
    task = await claim(store)
    command = schedule(1)
    command.schedule_activity.options.priority = 5
    eager = EagerActivities(QUEUE, frozenset({"act"}), 3)
    # Less urgent than the queued activity: not taken eagerly (on PostgreSQL the function
    # would give the task its run's priority 3 and take it, so it must hand it over).
    assert await store.complete_workflow_task(NS, task.lease, 1, [command], eager=eager) == []
    assert await _activity_run(store) == ("queued", 1)
    assert await _activity_run(store) == ("eager", 1)
