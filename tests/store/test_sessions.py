"""Worker sessions (``store/_sessions``, ``_ops_sessions``): a session's activities are
claimed only by its holder, a worker that registered sessions with the capabilities its
options require and a free slot; its concurrency bounds hold; a holder whose lease lapsed
is lost and the next claim by another qualifying worker takes it over keeping the TTL
deadline; the TTL closes it and fails its queued activities; the explicit handle's create,
renew and close are fenced; bad options are refused with INVALID_SESSION_OPTIONS. Times
are the database's (``wait_db_time``), on every backend."""

from __future__ import annotations

import pytest

from durable_rpc.errors import (
    InvalidSessionOptionsError,
    SessionClosedError,
    SessionHeldError,
    SessionLostError,
    SessionRequirementsUnmetError,
    SessionSlotsExhaustedError,
)
from durable_rpc.store import ClaimedActivityTask, Store
from durable_rpc.v1 import options_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    activity_options,
    claim,
    events,
    failure,
    history,
    payload,
    schedule,
    start,
    wait_db_time,
)

GPU = {"gpu": "a100"}


def session(
    session_id: str = "s1",
    *,
    lease_s: int = 30,
    ttl_s: int = 600,
    max_activities: int = 0,
    requires: dict[str, str] | None = None,
) -> options_pb2.SessionOptions:
    return options_pb2.SessionOptions(
        session_id=session_id,
        lease_seconds=lease_s,
        ttl_seconds=ttl_s,
        max_concurrent_activities=max_activities,
        requires=GPU if requires is None else requires,
    )


def in_session(options: options_pb2.SessionOptions) -> options_pb2.ActivityOptions:
    scheduled = activity_options(maximum_attempts=3)
    scheduled.session.CopyFrom(options)
    return scheduled


async def _worker(
    store: Store, worker_id: str, caps: dict[str, str] | None, max_sessions: int = 4
) -> None:
    """Registers ``worker_id`` on QUEUE; with sessions when ``caps`` is not None."""
    await store.register_worker(NS, worker_id, QUEUE, [], ["act"], "b1", False)
    if caps is not None:
        await store.register_worker_sessions(NS, worker_id, caps, max_sessions)


async def _schedule(
    store: Store, options: list[options_pb2.SessionOptions | None], workflow_id: str = "wf-1"
) -> str:
    """Starts ``workflow_id`` and schedules one activity per entry (None: no session)."""
    run_id = await start(store, workflow_id)
    task = await claim(store)
    commands = [
        schedule(seq, "act", in_session(o) if o is not None else None)
        for seq, o in enumerate(options, start=1)
    ]
    await store.complete_workflow_task(NS, task.lease, 1, commands)
    return run_id


async def _claim(store: Store, worker_id: str) -> ClaimedActivityTask | None:
    return await store.claim_activity_task(NS, QUEUE, worker_id, [])


async def test_only_the_holder_with_the_capabilities_claims_a_sessions_activities(
    store: Store,
) -> None:
    await _worker(store, "gpu", GPU)
    await _worker(store, "cpu", {"gpu": "none"})
    await _worker(store, "plain", None)
    await _schedule(store, [session(), session(), None])
    plain = await _claim(store, "plain")
    assert plain is not None and plain.seq == 3 and plain.session is None
    assert await _claim(store, "plain") is None, "no session worker gets a session's activity"
    assert await _claim(store, "cpu") is None, "capabilities that do not meet requires"
    first = await _claim(store, "gpu")
    assert first is not None and first.session is not None
    assert (first.session.state, first.session.holder_worker_id) == ("active", "gpu")
    assert first.session.generation == 1
    created = first.session.created_at_ms
    assert first.session.ttl_expires_at_ms is not None
    assert first.session.ttl_expires_at_ms >= created + 600_000
    second = await _claim(store, "gpu")
    assert second is not None and {first.seq, second.seq} == {1, 2}
    assert await _claim(store, "cpu") is None
    described = await store.describe_worker_session(NS, "s1")
    assert (described.state, described.holder_worker_id) == ("active", "gpu")
    assert options_pb2.SessionOptions.FromString(described.options).requires == GPU


async def test_a_runs_own_session_is_named_after_the_run(store: Store) -> None:
    await _worker(store, "gpu", GPU)
    run_id = await _schedule(store, [session("")])
    task = await _claim(store, "gpu")
    assert task is not None and task.session is not None
    assert task.session.session_id == f"run:{run_id}"


async def test_max_concurrent_activities_holds_at_claim(store: Store) -> None:
    await _worker(store, "gpu", GPU)
    await _schedule(store, [session(max_activities=1)] * 2)
    first = await _claim(store, "gpu")
    assert first is not None
    assert await _claim(store, "gpu") is None, "the session's one slot is taken"
    await store.complete_activity_task(NS, first.lease, payload(b"ok"))
    second = await _claim(store, "gpu")
    assert second is not None and second.seq != first.seq


async def test_max_concurrent_worker_sessions_holds(store: Store) -> None:
    await _worker(store, "gpu", GPU, max_sessions=1)
    await _worker(store, "gpu2", GPU, max_sessions=1)
    await _schedule(store, [session("a"), session("b")])
    first = await _claim(store, "gpu")
    assert first is not None and first.session is not None
    assert await _claim(store, "gpu") is None, "its one session slot is taken"
    other = await _claim(store, "gpu2")
    assert other is not None and other.session is not None
    assert other.session.session_id != first.session.session_id
    with pytest.raises(SessionSlotsExhaustedError):
        await store.create_worker_session(NS, "gpu", QUEUE, session("c").SerializeToString())


async def test_a_lost_holder_is_replaced_and_the_ttl_deadline_is_kept(store: Store) -> None:
    await _worker(store, "a", GPU)
    await _worker(store, "b", GPU)
    await _schedule(store, [session(lease_s=1), session(lease_s=1)])
    first = await _claim(store, "a")
    assert first is not None and first.session is not None
    ttl_deadline = first.session.ttl_expires_at_ms
    assert await _claim(store, "b") is None, "held by a live holder"
    assert first.session.lease_expires_at_ms is not None
    await wait_db_time(store, first.session.lease_expires_at_ms)
    lost = await store.describe_worker_session(NS, "s1")
    assert (lost.state, lost.holder_worker_id) == ("lost", "a")
    second = await _claim(store, "b")
    assert second is not None and second.session is not None
    assert (second.session.holder_worker_id, second.session.generation) == ("b", 2)
    assert second.session.reacquisitions == 1
    assert second.session.ttl_expires_at_ms == ttl_deadline, "reacquisition keeps the TTL"
    with pytest.raises(SessionLostError):
        await store.renew_worker_session(NS, "a", "s1", 1)


async def test_a_lapsed_holder_that_claims_again_keeps_its_generation(store: Store) -> None:
    """Nobody took the session over: the holder's own next claim gets it back as the same
    holder (generation and handle still valid), not as a takeover."""
    await _worker(store, "a", GPU)
    await _schedule(store, [session(lease_s=1), session(lease_s=1)])
    first = await _claim(store, "a")
    assert first is not None and first.session is not None
    assert first.session.lease_expires_at_ms is not None
    await wait_db_time(store, first.session.lease_expires_at_ms)
    assert (await store.describe_worker_session(NS, "s1")).state == "lost"
    again = await _claim(store, "a")
    assert again is not None and again.session is not None
    assert (again.session.state, again.session.generation) == ("active", 1)
    assert again.session.reacquisitions == 0
    renewed = await store.renew_worker_session(NS, "a", "s1", 1)
    assert renewed.state == "active"


async def test_an_activity_heartbeat_renews_the_holders_lease(store: Store) -> None:
    await _worker(store, "a", GPU)
    await _worker(store, "b", GPU)
    await _schedule(store, [session(lease_s=1), session(lease_s=1)])
    first = await _claim(store, "a")
    assert first is not None and first.session is not None
    assert first.session.lease_expires_at_ms is not None
    now = await wait_db_time(store, first.session.lease_expires_at_ms - 300)
    await store.heartbeat_activity_task(NS, first.lease, None)
    renewed = await store.describe_worker_session(NS, "s1")
    assert renewed.lease_expires_at_ms is not None
    assert renewed.lease_expires_at_ms >= now + 1_000
    await wait_db_time(store, first.session.lease_expires_at_ms + 50)
    assert await _claim(store, "b") is None, "the renewed holder still holds it"


async def test_the_ttl_closes_the_session_and_fails_its_queued_activities(
    store: Store,
) -> None:
    await _worker(store, "a", GPU)
    await _schedule(store, [session(lease_s=1, ttl_s=1, max_activities=1)] * 2)
    running = await _claim(store, "a")
    assert running is not None and running.session is not None
    assert running.session.ttl_expires_at_ms is not None
    await wait_db_time(store, running.session.ttl_expires_at_ms)
    await store.process_due()
    closed = await store.describe_worker_session(NS, "s1")
    assert (closed.state, closed.close_reason) == ("closed", "ttl_expired")
    failed = [e.activity_failed for e in events(await history(store)) if e.activity_failed.seq]
    assert [(f.seq, f.failure.type) for f in failed] == [(3 - running.seq, "SessionClosed")]
    assert "ttl_expired" in failed[0].failure.message
    # The running attempt's retry cannot run in the closed session.
    await store.fail_activity_task(NS, running.lease, failure())
    failed = [e.activity_failed for e in events(await history(store)) if e.activity_failed.seq]
    assert [f.failure.type for f in failed] == ["SessionClosed", "SessionClosed"]
    assert failed[1].failure.cause.type == "ValueError"


async def test_explicit_create_renew_and_close_are_fenced(store: Store) -> None:
    await _worker(store, "a", GPU)
    await _worker(store, "b", GPU)
    options = session("x", lease_s=5).SerializeToString()
    created = await store.create_worker_session(NS, "a", QUEUE, options)
    assert (created.state, created.holder_worker_id, created.generation) == ("active", "a", 1)
    assert await store.create_worker_session(NS, "a", QUEUE, options) == created
    with pytest.raises(SessionHeldError):
        await store.create_worker_session(NS, "b", QUEUE, options)
    with pytest.raises(SessionRequirementsUnmetError):
        await store.create_worker_session(
            NS, "b", QUEUE, session("y", requires={"gpu": "h100"}).SerializeToString()
        )
    renewed = await store.renew_worker_session(NS, "a", "x", 1)
    assert renewed.lease_expires_at_ms is not None and created.lease_expires_at_ms is not None
    assert renewed.lease_expires_at_ms >= created.lease_expires_at_ms
    assert renewed.ttl_expires_at_ms == created.ttl_expires_at_ms, "renew never extends TTL"
    with pytest.raises(SessionLostError):
        await store.renew_worker_session(NS, "b", "x", 1)
    with pytest.raises(SessionLostError):
        await store.close_worker_session(NS, "a", "x", 2, "done")
    await _schedule(store, [session("x", lease_s=5)])
    with pytest.raises(SessionLostError):
        await store.close_worker_session(NS, "b", "x", 1, "not mine")
    closed = await store.close_worker_session(NS, "a", "x", 1, "done")
    assert (closed.state, closed.close_reason) == ("closed", "done")
    failed = [e.activity_failed for e in events(await history(store)) if e.activity_failed.seq]
    assert [f.failure.type for f in failed] == ["SessionClosed"]
    assert "(done)" in failed[0].failure.message
    with pytest.raises(SessionClosedError):
        await store.renew_worker_session(NS, "a", "x", 1)
    assert await store.close_worker_session(NS, "a", "x", 1, "again") == closed


async def test_an_activity_scheduled_into_a_closed_session_fails_at_once(
    store: Store,
) -> None:
    await _worker(store, "a", GPU)
    created = await store.create_worker_session(NS, "a", QUEUE, session("x").SerializeToString())
    await store.close_worker_session(NS, "a", "x", created.generation, "done")
    await _schedule(store, [session("x")])
    assert await _claim(store, "a") is None
    failed = [e.activity_failed for e in events(await history(store)) if e.activity_failed.seq]
    assert [(f.seq, f.failure.type, f.failure.non_retryable) for f in failed] == [
        (1, "SessionClosed", True)
    ]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (session(ttl_s=0), "ttl_seconds must be > 0"),
        (session(ttl_s=366 * 86_400 + 1), "ttl_seconds must be at most 31622400"),
        (session(lease_s=0), "lease_seconds must be > 0 and <= ttl_seconds"),
        (session(lease_s=20, ttl_s=10), "lease_seconds must be > 0 and <= ttl_seconds"),
        (session(max_activities=-1), "max_concurrent_activities must be >= 0"),
        (session(requires={"gpu": ""}), "requirement 'gpu'"),
    ],
)
async def test_bad_session_options_are_refused(
    store: Store, options: options_pb2.SessionOptions, words: str
) -> None:
    await _worker(store, "a", GPU)
    await start(store)
    task = await claim(store)
    with pytest.raises(InvalidSessionOptionsError, match=words) as refused:
        await store.complete_workflow_task(
            NS, task.lease, 1, [schedule(1, "act", in_session(options))]
        )
    assert refused.value.reason == "INVALID_SESSION_OPTIONS"
    assert "command seq 1" in str(refused.value)
    with pytest.raises(InvalidSessionOptionsError, match=words):
        await store.create_worker_session(NS, "a", QUEUE, options.SerializeToString())


async def test_bad_worker_session_registrations_are_refused(store: Store) -> None:
    await _worker(store, "a", None)
    with pytest.raises(InvalidSessionOptionsError, match="max_concurrent_worker_sessions"):
        await store.register_worker_sessions(NS, "a", GPU, 0)
    with pytest.raises(InvalidSessionOptionsError, match="capability 'gpu'"):
        await store.register_worker_sessions(NS, "a", {"gpu": ""}, 1)


async def test_listing_a_queues_open_sessions_pages_by_id(store: Store) -> None:
    await _worker(store, "a", GPU, max_sessions=8)
    for session_id in ("s3", "s1", "s2", "s4"):
        await store.create_worker_session(NS, "a", QUEUE, session(session_id).SerializeToString())
    await store.create_worker_session(NS, "a", "other", session("o1").SerializeToString())
    await store.close_worker_session(NS, "a", "s4", 1, "done")
    first = await store.list_worker_sessions(NS, QUEUE, 2)
    assert [(s.session_id, s.state, s.holder_worker_id) for s in first] == [
        ("s1", "active", "a"),
        ("s2", "active", "a"),
    ]
    rest = await store.list_worker_sessions(NS, QUEUE, 2, after="s2")
    # The closed s4 and the other queue's o1 are not listed.
    assert [s.session_id for s in rest] == ["s3"]


async def test_describe_names_a_pending_activitys_session_and_why_it_waits(
    store: Store,
) -> None:
    await _worker(store, "plain", None)
    await _schedule(store, [session()])
    described = await store.describe(NS, "wf-1", None)
    (pending,) = described.pending_activities
    assert (pending.session_id, pending.state) == ("s1", "queued")
    assert described.stuck_reason == (
        "Waiting for activity 'act' (seq 1): it runs in session 's1' (not yet held), which "
        f"no live worker on task queue {QUEUE!r} may enter: start one with worker sessions "
        "with capabilities gpu=a100 that registers the activity and has a free session slot."
    )
    await _worker(store, "cpu", {"gpu": "none"})
    assert "may enter" in (await store.describe(NS, "wf-1", None)).stuck_reason
    await _worker(store, "gpu", GPU)
    assert (await store.describe(NS, "wf-1", None)).stuck_reason == "", "gpu may enter it"
    claimed = await _claim(store, "gpu")
    assert claimed is not None
    (leased,) = (await store.describe(NS, "wf-1", None)).pending_activities
    assert (leased.session_id, leased.state, leased.worker_id) == ("s1", "leased", "gpu")


async def test_why_an_activity_waits_for_its_sessions_holder(store: Store) -> None:
    await _worker(store, "gpu", GPU)
    await _worker(store, "gpu-2", GPU)
    await _schedule(store, [session(max_activities=1)])
    first = await _claim(store, "gpu")
    assert first is not None
    # Another run's activity in the same session: the holder runs the session's one slot
    # and the other qualifying worker may not enter a session held live.
    await _schedule(store, [session(max_activities=1)], workflow_id="wf-2")
    reason = (await store.describe(NS, "wf-2", None)).stuck_reason
    assert reason.startswith(
        "Waiting for activity 'act' (seq 1): it runs in session 's1', held by worker 'gpu' until "
    )
    assert reason.endswith(", which runs its limit of 1 concurrent activities.")
    await _schedule(store, [None], workflow_id="wf-3")
    assert (await store.describe(NS, "wf-3", None)).pending_activities[0].session_id is None
    await store.complete_activity_task(NS, first.lease, payload(b"ok"))
    assert (await store.describe(NS, "wf-2", None)).stuck_reason == "", "the slot is free"
