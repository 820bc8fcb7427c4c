"""Workflows, activities and the killable worker process of the worker-session tests
(tests/e2e/test_sessions.py):

    python -m tests.e2e.session_app ADDRESS TASK_QUEUE WORKER_ID

A worker with ``worker_sessions=True`` and capability gpu=a100. ``gpu_step`` records
``start:<step>`` to $DURABLE_RPC_TEST_LOG and, in this process, never returns for the
step named by $SESSION_APP_BLOCK (so the test can SIGKILL the holder mid-session).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
from datetime import timedelta
from typing import Any

from durable_rpc import Client, RetryPolicy, Worker, activity, workflow
from durable_rpc.sessions import SessionOptions
from durable_rpc.workflow import ActivityError
from tests.e2e.apps import record, serve

GPU = {"gpu": "a100"}
#: Activities seen running at once, per session (the max_concurrent_activities test).
_running: dict[str, int] = {}
_peak: dict[str, int] = {}
_lock = threading.Lock()


def _session_view() -> dict[str, Any]:
    session = activity.session()
    assert session is not None, "a session activity runs in its session"
    return {
        "session_id": session.session_id,
        "holder": session.holder_worker_id,
        "generation": session.generation,
        "state": session.state,
        "ttl_expires_at": session.ttl_expires_at.isoformat() if session.ttl_expires_at else "",
        "reacquisitions": session.reacquisitions,
    }


@activity.defn
async def gpu_step(step: str) -> dict[str, Any]:
    record(f"start:{step}")
    if os.environ.get("SESSION_APP_BLOCK") == step:
        await asyncio.Event().wait()  # the test kills this process now
    return _session_view()


@activity.defn
async def plain_step(step: str) -> str:
    assert activity.session() is None
    return step


@activity.defn
async def overlapping_step(step: str) -> dict[str, Any]:
    """Counts how many of its session's activities run at once (released by a short
    await so that parallel ones would overlap)."""
    session = activity.session()
    assert session is not None
    with _lock:
        _running[session.session_id] = _running.get(session.session_id, 0) + 1
        _peak[session.session_id] = max(
            _peak.get(session.session_id, 0), _running[session.session_id]
        )
    try:
        for _ in range(20):
            await asyncio.sleep(0)
    finally:
        with _lock:
            _running[session.session_id] -= 1
    return {**_session_view(), "peak": _peak[session.session_id]}


def peak(session_id: str) -> int:
    return _peak.get(session_id, 0)


TIMEOUT = timedelta(seconds=30)


@workflow.defn(name="SessionPipeline")
class SessionPipeline:
    """Three activities in one session (the run's own, or ``session_id``) and a plain one."""

    @workflow.run
    async def run(self, session_id: str | None, max_activities: int) -> list[Any]:
        options = SessionOptions(
            session_id=session_id,
            lease_seconds=30,
            ttl_seconds=600,
            max_concurrent_activities=max_activities,
            requires=GPU,
        )
        results: list[Any] = [
            await workflow.execute_activity(
                gpu_step, f"s{i}", start_to_close_timeout=TIMEOUT, session=options
            )
            for i in range(3)
        ]
        results.append(
            await workflow.execute_activity(plain_step, "p", start_to_close_timeout=TIMEOUT)
        )
        return results


@workflow.defn(name="SessionFanout")
class SessionFanout:
    """``count`` activities of one session scheduled at once."""

    @workflow.run
    async def run(self, count: int, max_activities: int) -> list[Any]:
        options = SessionOptions(
            lease_seconds=30, ttl_seconds=600, max_concurrent_activities=max_activities
        )
        calls = [
            workflow.execute_activity(
                overlapping_step, f"f{i}", start_to_close_timeout=TIMEOUT, session=options
            )
            for i in range(count)
        ]
        return list(await asyncio.gather(*calls))


@workflow.defn(name="SessionFailover")
class SessionFailover:
    """Step "a" then step "b" in the run's session, with a short session lease and
    attempts that time out quickly (the holder is killed during "b")."""

    @workflow.run
    async def run(self) -> list[Any]:
        options = SessionOptions(lease_seconds=2, ttl_seconds=600, requires=GPU)
        retry = RetryPolicy(initial_interval=timedelta(milliseconds=100))
        return [
            await workflow.execute_activity(
                gpu_step,
                step,
                start_to_close_timeout=timedelta(seconds=2),
                retry_policy=retry,
                session=options,
            )
            for step in ("a", "b")
        ]


@workflow.defn(name="SessionOutlived")
class SessionOutlived:
    """One activity, a sleep past the session's TTL, then another in the same session:
    the second fails with SessionClosed (reported as the workflow's result)."""

    @workflow.run
    async def run(self, session_id: str | None, sleep_s: float) -> list[Any]:
        options = SessionOptions(
            session_id=session_id, lease_seconds=60, ttl_seconds=3600, requires=GPU
        )
        first = await workflow.execute_activity(
            gpu_step, "before", start_to_close_timeout=TIMEOUT, session=options
        )
        await workflow.sleep(timedelta(seconds=sleep_s))
        try:
            await workflow.execute_activity(
                gpu_step, "after", start_to_close_timeout=TIMEOUT, session=options
            )
        except ActivityError as error:
            return [first, error.cause.type, error.cause.message]
        return [first, "ran", ""]


@workflow.defn(name="SessionProbe")
class SessionProbe:
    """One activity in session ``session_id``: what happened to it."""

    @workflow.run
    async def run(self, session_id: str) -> list[Any]:
        options = SessionOptions(session_id=session_id, lease_seconds=20, ttl_seconds=600)
        try:
            view = await workflow.execute_activity(
                gpu_step, "probe", start_to_close_timeout=TIMEOUT, session=options
            )
        except ActivityError as error:
            return ["failed", error.cause.type, error.cause.message]
        return ["ran", view]


WORKFLOWS = [SessionPipeline, SessionFanout, SessionFailover, SessionOutlived, SessionProbe]
ACTIVITIES = [gpu_step, plain_step, overlapping_step]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    parser.add_argument("worker_id")
    args = parser.parse_args()
    client = await Client.connect(args.address)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        worker_id=args.worker_id,
        worker_sessions=True,
        capabilities=GPU,
    )
    await serve(client, worker, cycles=4)


if __name__ == "__main__":
    asyncio.run(main())
