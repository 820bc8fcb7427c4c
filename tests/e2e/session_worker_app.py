"""Workflows and activities of the worker-side session tests
(tests/e2e/test_sessions_worker_side.py): the cut-off at the session's end, the lease
deadline an activity reads after renewals, and a parallel group's session. The activities
run in the test's own process (in-process workers), so they talk to the test through
asyncio events."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any

from durable_rpc import activity, workflow
from durable_rpc.sessions import SessionOptions
from durable_rpc.workflow import ActivityError
from tests.e2e.session_app import GPU, TIMEOUT, gpu_step


class Probe:
    """What one test's activity saw, and the events the test and the activity await."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cut_off = asyncio.Event()
        self.go_on = asyncio.Event()
        #: The session's lease deadline as the activity read it first.
        self.first_lease: datetime | None = None
        #: When (wall clock) the worker cancelled the activity, and its TTL deadline.
        self.cut_at: float | None = None
        self.ttl: datetime | None = None


PROBE = Probe()


def reset() -> Probe:
    global PROBE
    PROBE = Probe()
    return PROBE


def _lease() -> datetime:
    session = activity.session()
    assert session is not None and session.lease_expires_at is not None
    return session.lease_expires_at


@activity.defn
async def outlive_session() -> str:
    """Never heartbeats and never returns on its own: only its worker stops it."""
    probe = PROBE
    session = activity.session()
    assert session is not None
    probe.ttl = session.ttl_expires_at
    probe.started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        probe.cut_at = time.time()
        probe.cut_off.set()
        raise
    return "outlived"


@activity.defn
async def read_lease_after_renew() -> str:
    """The lease deadline it reads once the test renewed the session."""
    probe = PROBE
    probe.first_lease = _lease()
    probe.started.set()
    await probe.go_on.wait()
    return _lease().isoformat()


@activity.defn
async def read_lease_after_heartbeats() -> list[str]:
    """Heartbeats until the lease deadline it reads moved (the worker's heartbeats renew
    the session at half its lease), then both deadlines."""
    first = _lease()
    for _ in range(400):
        activity.heartbeat("working")
        if _lease() > first:
            return [first.isoformat(), _lease().isoformat()]
        await asyncio.sleep(0.025)
    return [first.isoformat(), first.isoformat()]


@workflow.defn(name="SessionCutOff")
class SessionCutOff:
    """One activity that outlives its session's 2 s TTL; what became of it."""

    @workflow.run
    async def run(self, session_id: str) -> list[str]:
        options = SessionOptions(session_id=session_id, lease_seconds=1, ttl_seconds=2)
        try:
            await workflow.execute_activity(
                outlive_session, start_to_close_timeout=timedelta(seconds=10), session=options
            )
        except ActivityError as error:
            failure = error.cause.failure
            cause = failure.cause.type if failure is not None else ""
            return ["failed", error.cause.type, cause]
        return ["completed", "", ""]


@workflow.defn(name="SessionLeaseReader")
class SessionLeaseReader:
    """One activity (``which``) in session ``session_id``; its result."""

    @workflow.run
    async def run(self, session_id: str, which: str, lease_seconds: int) -> Any:
        options = SessionOptions(
            session_id=session_id, lease_seconds=lease_seconds, ttl_seconds=600
        )
        fn = read_lease_after_renew if which == "renew" else read_lease_after_heartbeats
        return await workflow.execute_activity(fn, start_to_close_timeout=TIMEOUT, session=options)


@workflow.defn(name="SessionParallel")
class SessionParallel:
    """A group in the run's session (gpu required): two leaves, a nested group without a
    session of its own, a nested group with one, and a leaf with its own."""

    @workflow.run
    async def run(self, own_id: str, inner_id: str) -> dict[str, Any]:
        group = SessionOptions(lease_seconds=30, ttl_seconds=600, requires=GPU)
        own = SessionOptions(session_id=own_id, lease_seconds=30, ttl_seconds=600, requires=GPU)
        inner = SessionOptions(session_id=inner_id, lease_seconds=30, ttl_seconds=600, requires=GPU)

        def step(name: str, session: SessionOptions | None = None) -> Any:
            return workflow.execute_activity(
                gpu_step, name, start_to_close_timeout=TIMEOUT, session=session
            )

        result: dict[str, Any] = await workflow.parallel(
            {
                "a": step("a"),
                "b": step("b"),
                "nested": workflow.parallel([step("n0"), step("n1")]),
                "inner": workflow.parallel([step("i0")], session=inner),
                "own": step("own", own),
            },
            session=group,
        )
        return result


WORKFLOWS = [SessionCutOff, SessionLeaseReader, SessionParallel]
ACTIVITIES = [outlive_session, read_lease_after_renew, read_lease_after_heartbeats]
