"""The store's core rules at their edges, each on every backend: the fencing token of an
activity report (the shared fence and PostgreSQL's one-call decision), a stale release
that must not shorten a newer lease, namespace isolation of listing and counting,
retention by close time, and the history byte limit at exactly its value."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from durable_rpc.errors import HistoryLimitExceededError, LeaseLostError
from durable_rpc.store import (
    ClaimedActivityTask,
    EagerActivities,
    HistoryLimits,
    InlineWorkflowTask,
    LeaseRef,
    Store,
    StoreOptions,
)
from durable_rpc.store._tx import Tx
from tests.store.conftest import Backend
from tests.store.helpers import (
    NS,
    QUEUE,
    activity_options,
    claim,
    complete,
    events,
    failure,
    history,
    kinds,
    payload,
    schedule,
    start,
    wait_db_time,
)
from tests.store.test_activities import claim_activity

#: A 50 ms activity lease (its heartbeat timeout) inside a long start_to_close.
SHORT_LEASE = activity_options(start_to_close_ms=30_000, heartbeat_ms=50, initial_ms=10)


async def eager_activity(store: Store) -> tuple[str, ClaimedActivityTask]:
    """Starts wf-1, whose first decision schedules activity seq 1 with a 50 ms lease,
    claimed eagerly by w1. Returns (run id, the attempt)."""
    run_id = await start(store)
    task = await claim(store)
    done = await store.complete_workflow_task_tracked(
        NS,
        task.lease,
        1,
        [schedule(1, "act", SHORT_LEASE)],
        eager=EagerActivities(QUEUE, frozenset({"act"}), 1),
    )
    [activity] = done.eager_activities
    return run_id, activity


async def reclaimed_by_the_same_worker(
    store: Store, first: ClaimedActivityTask
) -> ClaimedActivityTask:
    """The expiry pass puts ``first``'s attempt back; the same worker id claims it again."""
    await wait_db_time(store, first.lease_expires_at_ms)
    assert (await store.process_due()).expired_activity_attempts == 1
    again = await claim_activity(store, first.lease.worker_id)
    assert again.lease.task_id == first.lease.task_id
    assert again.fencing_token == first.fencing_token + 1
    return again


def stale_reports(store: Store, lease: LeaseRef) -> list[Callable[[], Awaitable[object]]]:
    """Every report an activity's holder makes: completion, failure, heartbeat."""
    return [
        lambda: store.complete_activity_task(NS, lease, payload(b"stale")),
        lambda: store.fail_activity_task(NS, lease, failure()),
        lambda: store.heartbeat_activity_task(NS, lease, None),
    ]


async def history_length(store: Store) -> int:
    return (await store.describe(NS, "wf-1", None)).info.history_length


# -- the activity fence: the token, not only the worker id --------------------------------


async def test_an_older_token_of_the_same_worker_is_lease_lost(store: Store) -> None:
    # A poller restarted with the same worker id: its old lease's reports are stale.
    _, stale = await eager_activity(store)
    fresh = await reclaimed_by_the_same_worker(store, stale)
    before = await history(store)
    for report in stale_reports(store, stale.lease):
        with pytest.raises(LeaseLostError) as lost:
            await report()
        assert lost.value.reason == "LEASE_LOST"
    assert await history(store) == before
    await store.complete_activity_task(NS, fresh.lease, payload(b"fresh"))
    completed = events(await history(store))[-1].activity_completed
    assert (completed.fencing_token, completed.result.data) == (fresh.fencing_token, b"fresh")


async def test_another_worker_id_with_the_holders_token_is_lease_lost(store: Store) -> None:
    _, held = await eager_activity(store)
    forged = LeaseRef(held.lease.task_id, "aw-other", held.lease.fencing_token)
    for report in stale_reports(store, forged):
        with pytest.raises(LeaseLostError):
            await report()
    assert kinds(await history(store))[-1] == "activity_scheduled"
    await store.complete_activity_task(NS, held.lease, payload(b"mine"))
    completed = events(await history(store))[-1].activity_completed
    assert (completed.worker_id, completed.result.data) == (held.lease.worker_id, b"mine")


async def test_an_older_token_with_an_inline_decision_is_lease_lost(store: Store) -> None:
    """PostgreSQL records an inline decision in one function call: the same fence."""
    run_id, stale = await eager_activity(store)
    fresh = await reclaimed_by_the_same_worker(store, stale)
    length = await history_length(store)
    before = await history(store)
    closing = InlineWorkflowTask(run_id, length, [complete(2, b"stale")])
    with pytest.raises(LeaseLostError):
        await store.complete_activity_task_inline(
            NS, stale.lease, payload(b"stale"), inline=closing
        )
    assert await history(store) == before
    done = await store.complete_activity_task_inline(
        NS, fresh.lease, payload(b"fresh"), inline=InlineWorkflowTask(run_id, length, [complete(2)])
    )
    assert done.inline is not None
    assert (await store.get_outcome(NS, "wf-1", run_id)).status == "completed"
    completed = events(await history(store))[length].activity_completed
    assert completed.fencing_token == fresh.fencing_token


# -- a stale release leaves the newer lease alone -----------------------------------------


async def expires_at(store: Store, task_id: int) -> int:
    def op(tx: Tx) -> int:
        return int(tx.value("SELECT expires_at_ms FROM tasks WHERE task_id = ?", (task_id,)))

    held_until: int = await store._read(op)  # type: ignore[attr-defined]
    return held_until


async def test_a_stale_release_leaves_the_newer_lease_of_the_same_worker_alone(
    store: Store,
) -> None:
    await start(store)
    stale = await claim(store, "w1", lease_ms=50)
    await wait_db_time(store, stale.lease_expires_at_ms)
    await store.process_due()  # back in the queue, same token
    fresh = await claim(store, "w1")
    assert fresh.fencing_token == stale.fencing_token + 1
    held_until = await expires_at(store, fresh.task_id)

    assert await store.release_workflow_task(NS, stale.lease) is False
    assert await expires_at(store, fresh.task_id) == held_until
    await wait_db_time(store, (await store.now_ms()) + 5)
    assert await store.claim_workflow_task(NS, QUEUE, "w2", 30_000) is None
    assert await store.lease_holds(NS, fresh.lease)
    await store.complete_workflow_task(NS, fresh.lease, len(fresh.events), [complete(1)])
    assert kinds(await history(store))[-1] == "workflow_completed"


# -- namespaces: a listing or a count reads its own namespace only ------------------------


async def test_listing_and_counting_read_one_namespace(store: Store) -> None:
    await store.create_namespace("other", "", 86_400_000)
    mine = {await start(store, f"mine-{i}") for i in range(2)}
    theirs = await store.start_workflow(
        "other", "theirs", "Order", "1", QUEUE, payload(b"a"), "r-theirs"
    )
    await store.terminate("other", "theirs", None, "done")

    for namespace, expected in ((NS, mine), ("other", {theirs.run_id})):
        runs, _ = await store.list_runs(namespace, None, None, None, None, 100, None)
        assert {run.run_id for run in runs} == expected
        by_type, _ = await store.list_runs(namespace, None, "Order", None, None, 100, None)
        assert {run.run_id for run in by_type} == expected
        queried, _ = await store.list_runs(
            namespace, None, None, None, None, 100, None, "WorkflowType = 'Order'"
        )
        assert {run.run_id for run in queried} == expected
    assert await store.count_runs(NS, None, None, None, None) == {"running": 2}
    assert await store.count_runs("other", None, None, None, None) == {"terminated": 1}
    assert await store.count_runs(NS, "terminated", None, None, None) == {}
    assert await store.count_runs("other", "running", "Order", None, None) == {}


# -- retention judges a run by its close time ---------------------------------------------

#: Long enough that the sweep follows the last close well within it, even on a busy machine.
RETENTION_MS = 2_000


async def test_retention_keeps_an_old_run_closed_just_now(store: Store) -> None:
    await store.update_namespace(NS, None, RETENTION_MS)
    long_running = await start(store, "long")
    short = await start(store, "short")
    await store.terminate(NS, "short", None, "done")
    closed_at = (await store.describe(NS, "short", short)).info.close_time_ms
    assert closed_at is not None
    await wait_db_time(store, closed_at + RETENTION_MS + 1)
    # Started before the retention period, closed only now.
    await store.terminate(NS, "long", None, "done")

    assert await store.take_maintenance_lease("retention", "replica-a", 30_000)
    batch = await store.delete_expired_runs("replica-a", 100, 1_000)
    assert batch.deleted == 1
    runs, _ = await store.list_runs(NS, None, None, None, None, 100, None)
    assert [run.run_id for run in runs] == [long_running]


# -- the history byte limit: at the limit accepted, one byte over refused -----------------

BYTE_LIMITS = HistoryLimits(
    max_events=1_000, max_bytes=6_000, warn_events=500, warn_bytes=3_000, page_bytes=100_000
)


@pytest.fixture
async def byte_limited(backend: Backend) -> AsyncIterator[Store]:
    store = backend.make(StoreOptions(history=BYTE_LIMITS))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def _size(store: Store, workflow_id: str) -> int:
    return (await store.describe(NS, workflow_id, None)).info.history_size_bytes


async def _signal(store: Store, workflow_id: str, size: int) -> bool:
    return await store.signal_workflow(NS, workflow_id, None, "sig", payload(b"x" * size), "")


async def _fill_to_the_limit(store: Store, workflow_id: str) -> tuple[int, int]:
    """Signals whose payload shrinks a byte at a time from two bytes past the limit until
    one is accepted. Returns (the history size then, the refusals before it). An event's
    time encodes in a few bytes more or less with its millisecond, so the sizes tried are
    estimates: the caller retries on a fresh run when a step changed more than its byte."""
    await start(store, workflow_id)
    await _signal(store, workflow_id, 200)  # measures one signal event's overhead
    size = await _size(store, workflow_id)
    probe = (await store.get_history(NS, workflow_id, None, 0, 100)).events[-1]
    overhead = len(probe) - 200
    data = BYTE_LIMITS.max_bytes - size - overhead + 2
    refusals = 0
    for _ in range(8):
        try:
            await _signal(store, workflow_id, data)
        except HistoryLimitExceededError:
            refusals += 1
            data -= 1
            continue
        return await _size(store, workflow_id), refusals
    raise AssertionError("no signal near the limit was accepted")


async def test_a_history_exactly_at_the_byte_limit_is_accepted(byte_limited: Store) -> None:
    for attempt in range(3):
        size, refusals = await _fill_to_the_limit(byte_limited, f"full-{attempt}")
        if size == BYTE_LIMITS.max_bytes and refusals == 2:
            break
    assert size == BYTE_LIMITS.max_bytes, "the signal bringing the history to its limit"
    # Two bytes and one byte past the limit were refused, with nothing recorded.
    assert refusals == 2
    with pytest.raises(HistoryLimitExceededError):
        await _signal(byte_limited, f"full-{attempt}", 0)
    assert await _size(byte_limited, f"full-{attempt}") == BYTE_LIMITS.max_bytes
