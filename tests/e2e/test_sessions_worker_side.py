"""Worker sessions on the worker's side, end to end (real servers, SQLite and PostgreSQL,
and in-process workers): an activity that outlives its session's TTL is cancelled by its
worker at the TTL (as a lost lease: nothing reported); ``activity.session()`` shows the
lease deadline a handle's renew and the worker's heartbeats extended; a parallel group's
session routes each activity leaf without one of its own."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

import pytest

from durable_rpc import Client, Worker
from durable_rpc.sessions import SessionOptions
from tests.e2e import session_app, session_worker_app
from tests.e2e.conftest import ServerProcess
from tests.e2e.session_app import GPU
from tests.e2e.test_sessions import _describe, served

__all__ = ["served"]  # the fixture, shared with test_sessions.py

pytestmark = pytest.mark.timeout(180)

#: How long a test awaits an event its worker should cause within a few seconds.
WAIT_S = 30


def _worker(client: Client, queue: str, worker_id: str, **kw: Any) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=[*session_app.WORKFLOWS, *session_worker_app.WORKFLOWS],
        activities=[*session_app.ACTIVITIES, *session_worker_app.ACTIVITIES],
        worker_id=worker_id,
        **kw,
    )


def _ids() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"q-{suffix}", f"s-{suffix}"


async def test_an_activity_outliving_the_session_ttl_is_cut_off_at_the_ttl(
    served: tuple[ServerProcess, Client],
) -> None:
    """The activity never heartbeats and never returns; the session's TTL is 2 s and the
    attempt's start_to_close 10 s. Its worker cancels it once the TTL passed by its
    clock (the server would not stop it before the 10 s), reports nothing, and the retry
    after the attempt's timeout fails with SessionClosed."""
    _, client = served
    queue, session_id = _ids()
    probe = session_worker_app.reset()
    async with _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU):
        handle = await client.start_workflow(
            "SessionCutOff", session_id, id=f"cut-{session_id}", task_queue=queue
        )
        await asyncio.wait_for(probe.started.wait(), WAIT_S)
        # Well before the attempt's own 10 s deadline, which would also stop it.
        await asyncio.wait_for(probe.cut_off.wait(), 8)
        assert probe.ttl is not None and probe.cut_at is not None
        # The same machine's clock: the cut-off came at the TTL, not at the 1 s session
        # lease (the worker heartbeat it at half its lease).
        assert probe.cut_at >= probe.ttl.timestamp()
        outcome = await handle.result(timeout=60)
    # Nothing was reported: a reported attempt failure (the CancelledError) would be the
    # SessionClosed failure's cause; the retry after the attempt's timeout has none.
    assert outcome == ["failed", "SessionClosed", ""]
    closed = await _describe(client, session_id)
    assert (closed.state, closed.close_reason) == ("closed", "ttl_expired")


async def test_activity_session_shows_the_lease_a_renew_extended(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    queue, session_id = _ids()
    probe = session_worker_app.reset()
    worker = _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU)
    async with worker:
        session = worker.worker_session(
            SessionOptions(session_id=session_id, lease_seconds=60, ttl_seconds=600)
        )
        await session.create()
        handle = await client.start_workflow(
            "SessionLeaseReader", session_id, "renew", 60, id=f"r-{session_id}", task_queue=queue
        )
        await asyncio.wait_for(probe.started.wait(), WAIT_S)
        renewed = await session.renew()
        assert renewed.lease_expires_at is not None and probe.first_lease is not None
        assert renewed.lease_expires_at > probe.first_lease
        probe.go_on.set()
        read = await handle.result(timeout=60)
    assert datetime.fromisoformat(read) == renewed.lease_expires_at


async def test_activity_session_shows_the_lease_its_heartbeats_extended(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    queue, session_id = _ids()
    async with _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU):
        handle = await client.start_workflow(
            "SessionLeaseReader", session_id, "heartbeat", 2, id=f"h-{session_id}", task_queue=queue
        )
        first, moved = await handle.result(timeout=60)
        stored = await _describe(client, session_id)
    assert datetime.fromisoformat(moved) > datetime.fromisoformat(first)
    assert stored.lease_expires_at is not None
    assert stored.lease_expires_at >= datetime.fromisoformat(moved)


async def test_a_parallel_groups_session_routes_each_leaf_without_its_own(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    queue, suffix = _ids()
    own_id, inner_id = f"own-{suffix}", f"inner-{suffix}"
    # "cpu" takes sessions without the capability, "plain" takes none: both poll all
    # along, so a leaf that lost its session would run on one of them (and gpu_step
    # fails outside a session).
    async with (
        _worker(client, queue, "cpu", worker_sessions=True, capabilities={"gpu": "none"}),
        _worker(client, queue, "plain"),
    ):
        handle = await client.start_workflow(
            "SessionParallel", own_id, inner_id, id=f"p-{suffix}", task_queue=queue
        )
        async with _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU):
            result = await handle.result(timeout=60)
    run_session = f"run:{handle.run_id}"
    leaves = {
        "a": result["a"],
        "b": result["b"],
        "n0": result["nested"][0],
        "n1": result["nested"][1],
        "i0": result["inner"][0],
        "own": result["own"],
    }
    assert {name: leaf["holder"] for name, leaf in leaves.items()} == dict.fromkeys(leaves, "gpu")
    assert {name: leaf["session_id"] for name, leaf in leaves.items()} == {
        "a": run_session,
        "b": run_session,
        "n0": run_session,
        "n1": run_session,
        "i0": inner_id,
        "own": own_id,
    }
