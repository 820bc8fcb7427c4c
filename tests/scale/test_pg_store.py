"""The PostgreSQL store under concurrency from several replicas (several stores in one
process on one database): wake-ups across replicas, claim races, process_due run twice at
once, racing writes to one run, concurrent migrations and a database outage."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import defaultdict

import psycopg
import pytest

from durable_rpc.errors import (
    LeaseLostError,
    StoreUnavailableError,
    WorkflowAlreadyStartedError,
    WorkflowNotRunningError,
)
from durable_rpc.store import ClaimedWorkflowTask, StartResult, Store, StoreOptions, open_store
from durable_rpc.store._ops_leases import lease_check_at
from durable_rpc.v1 import workflow_task_pb2
from tests.scale.cluster import Cluster
from tests.scale.conftest import FAST, OpenPg
from tests.store.helpers import (
    NS,
    QUEUE,
    RecordingListener,
    activity_options,
    claim,
    complete,
    events,
    history,
    kinds,
    payload,
    schedule,
    start,
    timer,
    wait_db_time,
)

pytestmark = pytest.mark.timeout(120)


def assert_contiguous(raw: list[bytes]) -> None:
    ids = [e.event_id for e in events(raw)]
    assert ids == list(range(1, len(ids) + 1)), ids


async def test_listener_hears_changes_committed_by_another_replica(open_pg: OpenPg) -> None:
    a = await open_pg()
    b = await open_pg()
    heard = RecordingListener()
    a.set_listener(heard)
    own = RecordingListener()
    b.set_listener(own)

    run_id = await start(b, "wf-x")
    await heard.wait_for(lambda: (NS, QUEUE, "workflow") in heard.tasks, "B's new task")
    task = await claim(b, lease_ms=60_000)
    # When to look for the lease's expiry: on the lease-check grid, never before it.
    check = lease_check_at(task.lease_expires_at_ms)
    assert task.lease_expires_at_ms <= check < task.lease_expires_at_ms + 250
    await heard.wait_for(lambda: check in heard.due, "B's lease expiry")
    await b.complete_workflow_task(NS, task.lease, len(task.events), [complete(1)])
    await heard.wait_for(lambda: (NS, run_id) in heard.closed, "B's run closing")

    # B heard its own changes once: locally after the commit, not again through LISTEN.
    # Notifications arrive in commit order: once B hears A's later start, any echo of
    # B's own changes would have arrived before it.
    await start(a, "barrier", queue="barrier-queue")
    await own.wait_for(lambda: (NS, "barrier-queue", "workflow") in own.tasks, "A's start")
    assert own.closed == [(NS, run_id)]
    assert own.tasks.count((NS, QUEUE, "workflow")) == 1


async def test_replicas_starting_together_migrate_once(pg_url: str) -> None:
    stores = [open_store(pg_url, FAST) for _ in range(4)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        await asyncio.gather(*(start(s, f"wf-{i}") for i, s in enumerate(stores)))
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))


async def test_concurrent_starts_across_replicas(open_pg: OpenPg) -> None:
    replicas = [await open_pg(), await open_pg()]

    async def start_on(i: int, workflow_id: str, request_id: str) -> StartResult:
        store = replicas[i % 2]
        return await store.start_workflow(
            NS, workflow_id, "Order", "1", QUEUE, payload(b"x"), request_id
        )

    # Different requests, one workflow id: exactly one run starts.
    outcomes = await asyncio.gather(
        *(start_on(i, "same-id", f"req-{i}") for i in range(8)), return_exceptions=True
    )
    started = [o for o in outcomes if isinstance(o, StartResult)]
    assert len(started) == 1 and started[0].started
    assert all(isinstance(o, WorkflowAlreadyStartedError) for o in outcomes if o not in started)

    # One request repeated: every call answers with the same run, one of them started it.
    again = await asyncio.gather(*(start_on(i, "other-id", "one-request") for i in range(8)))
    assert len({r.run_id for r in again}) == 1
    assert sum(r.started for r in again) == 1


async def test_claim_race_never_two_holders_and_tokens_rise(open_pg: OpenPg) -> None:
    """Many claimers on two replicas, short leases, some holders stalling past their lease:
    a task is only ever taken over after its lease expired, tokens rise 1, 2, 3, ... and
    exactly one holder completes it."""
    replicas = [await open_pg(), await open_pg()]
    runs = 60
    for i in range(runs):
        await start(replicas[i % 2], f"wf-{i}")
    claims: defaultdict[int, list[ClaimedWorkflowTask]] = defaultdict(list)
    completed: defaultdict[int, list[int]] = defaultdict(list)
    lost = 0
    finished = asyncio.Event()

    async def claimer(k: int) -> None:
        nonlocal lost
        store = replicas[k % 2]
        rng = random.Random(k)
        while not finished.is_set():
            task = await store.claim_workflow_task(NS, QUEUE, f"w{k}", 300)
            if task is None:
                await asyncio.sleep(0.01)
                continue
            claims[task.task_id].append(task)
            if rng.random() < 0.25:
                await asyncio.sleep(0.45)  # stall past the lease: someone takes over
            try:
                await store.complete_workflow_task(NS, task.lease, len(task.events), [complete(1)])
            except LeaseLostError:
                lost += 1
            else:
                completed[task.task_id].append(task.fencing_token)

    async def all_closed() -> None:
        while True:
            page, _ = await replicas[0].list_runs(NS, "completed", None, None, None, 1000, None)
            if len(page) == runs:
                finished.set()
                return
            await asyncio.sleep(0.05)

    await asyncio.wait_for(
        asyncio.gather(all_closed(), *(claimer(k) for k in range(24))), timeout=90
    )
    assert lost > 0, "the test should have provoked takeovers"
    for task_id, held in claims.items():
        held.sort(key=lambda t: t.fencing_token)
        assert [t.fencing_token for t in held] == list(range(1, len(held) + 1))
        for before, after in itertools.pairwise(held):
            # A takeover happens only once the previous lease expired (database time).
            assert after.workflow_time_ms >= before.lease_expires_at_ms
        assert len(completed[task_id]) == 1, (task_id, completed[task_id])
    for i in range(runs):
        assert_contiguous(await history(replicas[0], f"wf-{i}"))


async def _run_with(
    store: Store, workflow_id: str, command_list: list[workflow_task_pb2.Command]
) -> str:
    run_id = await start(store, workflow_id)
    task = await claim(store)
    assert task.run_id == run_id
    await store.complete_workflow_task(NS, task.lease, len(task.events), command_list)
    return run_id


async def test_process_due_on_two_replicas_at_once_fires_each_timer_once(
    open_pg: OpenPg,
) -> None:
    options = StoreOptions(due_batch=15)  # several batches: the replicas interleave
    a = await open_pg(options)
    b = await open_pg(options)
    runs = 80
    for i in range(runs):
        await _run_with(a, f"t-{i}", [timer(1, 300)])
    fired = 0
    deadline = time.monotonic() + 30
    while fired < runs and time.monotonic() < deadline:
        reports = await asyncio.gather(*(s.process_due() for s in (a, b, a, b)))
        fired += sum(r.fired_timers for r in reports)
        await asyncio.sleep(0.02)
    assert fired == runs
    for i in range(runs):
        raw = await history(a, f"t-{i}")
        assert kinds(raw).count("timer_fired") == 1
        assert_contiguous(raw)
        started, fired_at = events(raw)[2], events(raw)[3]
        assert fired_at.WhichOneof("attributes") == "timer_fired"
        # Fired by the database clock: never before the timer's due time.
        assert fired_at.event_time.ToMilliseconds() >= started.event_time.ToMilliseconds() + 300


async def test_expired_activity_attempts_are_processed_once(open_pg: OpenPg) -> None:
    a = await open_pg(StoreOptions(due_batch=10))
    b = await open_pg(StoreOptions(due_batch=10))
    runs = 30
    options = activity_options(start_to_close_ms=200, non_idempotent=True)
    for i in range(runs):
        await _run_with(a, f"act-{i}", [schedule(1, options=options)])
    expiries = []
    for i in range(runs):
        attempt = await (a if i % 2 else b).claim_activity_task(NS, QUEUE, f"w{i}", [])
        assert attempt is not None
        expiries.append(attempt.lease_expires_at_ms)
    await wait_db_time(a, max(expiries) + 1)  # every attempt is past its deadline
    expired = 0
    for _ in range(20):
        reports = await asyncio.gather(*(s.process_due() for s in (a, b, a, b)))
        expired += sum(r.expired_activity_attempts for r in reports)
        if expired >= runs:
            break
    assert expired == runs
    for i in range(runs):
        raw = await history(a, f"act-{i}")
        assert kinds(raw).count("activity_failed") == 1  # fails closed, once
        assert_contiguous(raw)


async def test_racing_writes_to_one_run_are_serialized(open_pg: OpenPg) -> None:
    """Terminate, signal and workflow-task completion of the same runs from two replicas
    at once (lock-order deadlocks are retried): every call either applies or gets the
    domain error a serial order would give; histories stay gapless with one close."""
    a = await open_pg()
    b = await open_pg()
    runs = 25
    tasks = []
    for i in range(runs):
        await start(a, f"race-{i}")
        tasks.append(await claim(a))
    calls = []
    for i, task in enumerate(tasks):
        calls += [
            b.terminate(NS, f"race-{i}", None, "stop"),
            a.complete_workflow_task(NS, task.lease, len(task.events), [complete(1)]),
            b.signal_workflow(NS, f"race-{i}", None, "poke", payload(b"p"), f"sig-{i}"),
        ]
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    unexpected = [
        o
        for o in outcomes
        if isinstance(o, BaseException) and not isinstance(o, WorkflowNotRunningError)
    ]
    assert not unexpected, unexpected
    for i in range(runs):
        raw = await history(a, f"race-{i}")
        assert_contiguous(raw)
        closing = [k for k in kinds(raw) if k in ("workflow_completed", "workflow_terminated")]
        assert len(closing) == 1, kinds(raw)


async def test_database_outage_answers_unavailable_then_recovers(
    pg_cluster: Cluster, open_pg: OpenPg
) -> None:
    a = await open_pg()
    b = await open_pg()
    heard = RecordingListener()
    a.set_listener(heard)
    await start(a, "before")
    pg_cluster.server_stop()
    try:
        began = time.monotonic()
        with pytest.raises(StoreUnavailableError):
            await start(a, "during")
        with pytest.raises(StoreUnavailableError):
            await a.describe(NS, "before", None)
        assert time.monotonic() - began < 15
    finally:
        pg_cluster.server_start()

    async def started_after() -> bool:
        try:
            await start(a, "after")
        except StoreUnavailableError:
            return False
        return True

    deadline = time.monotonic() + 30
    while not await started_after():
        assert time.monotonic() < deadline, "the store did not recover"
        await asyncio.sleep(0.1)
    # The LISTEN connection came back and woke everything (notifications may be lost).
    await heard.wait_for(lambda: 0 in heard.due, "the wake-up after LISTEN reconnected")
    heard.tasks.clear()
    await start(b, "after-b")
    await heard.wait_for(lambda: (NS, QUEUE, "workflow") in heard.tasks, "B's task")
    # Nothing acknowledged before the outage was lost, nothing refused was half-applied.
    assert (await a.describe(NS, "before", None)).info.status == "running"
    page, _ = await a.list_runs(NS, None, None, None, None, 100, None)
    assert sorted(r.workflow_id for r in page) == ["after", "after-b", "before"]


async def two_listening_replicas(
    open_pg: OpenPg,
) -> tuple[Store, Store, RecordingListener, RecordingListener]:
    """Two stores on the test's database, each with a listener."""
    one, other = await open_pg(), await open_pg()
    hears, other_hears = RecordingListener(), RecordingListener()
    one.set_listener(hears)
    other.set_listener(other_hears)
    return one, other, hears, other_hears


async def test_a_query_asked_on_one_replica_is_answered_through_another(
    open_pg: OpenPg,
) -> None:
    asking, polled, asker_hears, poller_hears = await two_listening_replicas(open_pg)

    for i in range(10):
        await asking.submit_query(NS, QUEUE, f"q-{i}", ("Counter", "1"), f"{i}".encode(), 60_000)
    await poller_hears.wait_for(lambda: (NS, QUEUE, "query") in poller_hears.tasks, "a query")
    # Twenty pollers on both replicas at once: every query is handed out exactly once.
    taken = await asyncio.gather(
        *(s.take_query(NS, QUEUE, [("Counter", "1")]) for s in [asking, polled] * 10)
    )
    assert sorted(t for t in taken if t is not None) == sorted(f"{i}".encode() for i in range(10))

    assert await polled.answer_query(NS, "q-3", b"three")
    await asker_hears.wait_for(lambda: (NS, "q-3") in asker_hears.answered, "the answer")
    assert await asking.query_answer(NS, "q-3") == b"three"


async def test_an_update_requested_on_one_replica_is_settled_through_another(
    open_pg: OpenPg,
) -> None:
    asking, polled, asker_hears, _ = await two_listening_replicas(open_pg)
    run_id = await start(asking, "wf-u")
    await polled.complete_workflow_task(NS, (await claim(polled)).lease, 1, [])

    assert await asking.request_update(NS, run_id, "u-1", "rename", payload(b"x"))
    task = await claim(polled)
    assert [u.update_id for u in task.pending_updates] == ["u-1"]
    await polled.complete_workflow_task_tracked(
        NS, task.lease, len(task.events), [], rejected_updates=[("u-1", b"")]
    )
    await asker_hears.wait_for(lambda: (NS, "u-1") in asker_hears.updates, "the rejection")
    assert await asking.update_rejection(NS, run_id, "u-1") == b""


async def test_a_key_revoked_through_one_replica_is_refused_by_another(
    open_pg: OpenPg, pg_url: str
) -> None:
    """Replicas cache keys while LISTEN is live and forget them on the NOTIFY a
    revocation sends in its own transaction (as an offline `token revoke --db` does)."""
    from durable_rpc.auth import new_key

    a = await open_pg()
    b = await open_pg()
    made = new_key()
    # Made through A: B's notification of it could otherwise reach A after A cached it.
    await a.create_api_key(made.key_id, made.secret_hash, "client", "default", "", None)
    first = await a.lookup_api_key(made.key_id)
    assert first is not None and first.key.revoked_at_ms is None
    # A change behind the store's back (no NOTIFY) is not seen: A answers from its cache.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE api_keys SET name = 'renamed' WHERE key_id = %s", (made.key_id,))
    cached = await a.lookup_api_key(made.key_id)
    assert cached is not None and cached.key.name == ""
    assert abs(cached.now_ms - first.now_ms) < 5_000  # the database clock, estimated

    await b.revoke_api_key(made.key_id, "default")
    deadline = time.monotonic() + 5
    while True:
        seen = await a.lookup_api_key(made.key_id)
        assert seen is not None
        if seen.key.revoked_at_ms is not None:
            break
        assert time.monotonic() < deadline, "replica A never heard of the revocation"
        await asyncio.sleep(0.002)
    assert seen.key.name == "renamed"  # read again, not patched
    print(f"revocation reached the other replica in {5 - (deadline - time.monotonic()):.3f} s")
