"""Worker sessions end to end: real servers (SQLite and PostgreSQL) and real workers (in
this process and, to be killed, in another): a session's activities all run on its
holder and never on a worker without the capability; its max_concurrent_activities and a
worker's max_concurrent_worker_sessions hold; a killed holder's session goes to another
worker keeping its original TTL; graceful shutdown closes held sessions; the explicit
handle creates, renews and closes; the TTL closes a session (time-skipping environment);
bad options are refused with a clear reason."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from durable_rpc import Client, Worker, workflow
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.errors import InvalidSessionOptionsError
from durable_rpc.sessions import SessionOptions, WorkerSession
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import history_pb2, options_pb2, session_service_pb2, session_service_pb2_grpc
from tests.e2e import session_app
from tests.e2e.conftest import ServerProcess, WorkerProcess, eventually
from tests.e2e.session_app import ACTIVITIES, GPU, TIMEOUT, WORKFLOWS, SessionPipeline, gpu_step
from tests.scale import cluster as pg

pytestmark = pytest.mark.timeout(180)


@workflow.defn(name="SessionPipeline")
class SessionPipelineShorterTtl:
    """SessionPipeline with its session's TTL changed: its histories must not replay."""

    @workflow.run
    async def run(self, session_id: str | None, max_activities: int) -> list[Any]:
        options = SessionOptions(
            session_id=session_id,
            lease_seconds=30,
            ttl_seconds=60,
            max_concurrent_activities=max_activities,
            requires=GPU,
        )
        return [
            await workflow.execute_activity(
                gpu_step, "s0", start_to_close_timeout=TIMEOUT, session=options
            )
        ]


@pytest.fixture(params=["sqlite", *(["postgres"] if pg.available() else [])])
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[ServerProcess, Client]]:
    url = pg.require_cluster().create_database() if request.param == "postgres" else None
    # A later --db overrides the fixture's SQLite file.
    extra = ("--db", url) if url is not None else ()
    server = ServerProcess(tmp_path / "durable.db", tmp_path / "server.log", *extra)
    server.start()
    try:
        async with await Client.connect(server.address) as client:
            yield server, client
    finally:
        server.stop()
        if url is not None:
            pg.require_cluster().drop_database(url)


def _queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def _worker(client: Client, queue: str, worker_id: str, **kw: Any) -> Worker:
    return Worker(
        client,
        task_queue=queue,
        workflows=WORKFLOWS,
        activities=ACTIVITIES,
        worker_id=worker_id,
        **kw,
    )


async def _describe(client: Client, session_id: str) -> WorkerSession:
    stub = session_service_pb2_grpc.WorkerSessionServiceStub(client.channel)
    response = await stub.DescribeWorkerSession(
        session_service_pb2.DescribeWorkerSessionRequest(session_id=session_id)
    )
    return WorkerSession.from_proto(response.session)


async def test_a_sessions_activities_run_on_its_holder_only(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    queue = _queue()
    # "cpu" takes sessions but lacks the capability; "plain" takes none. Both poll the
    # queue all along, so any misrouting would hand them a session's activity.
    async with (
        _worker(client, queue, "cpu", worker_sessions=True, capabilities={"gpu": "none"}),
        _worker(client, queue, "plain"),
    ):
        handle = await client.start_workflow(
            "SessionPipeline", None, 0, id="pipeline", task_queue=queue
        )

        async def waits_for_a_gpu_worker() -> bool:
            described = await handle.describe()
            sessions = {a.session_id for a in described.pending_activities}
            return sessions == {f"run:{handle.run_id}"} and (
                "which no live worker on task queue" in described.stuck_reason
                and "capabilities gpu=a100" in described.stuck_reason
            )

        # Describe names the session its activity waits in and why nobody claims it.
        await eventually(waits_for_a_gpu_worker, what="the session's activity pending")
        async with _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU):
            results = await handle.result(timeout=60)
    *steps, plain = results
    assert plain == "p"
    assert {s["holder"] for s in steps} == {"gpu"}
    assert {s["generation"] for s in steps} == {1}
    assert {s["session_id"] for s in steps} == {f"run:{handle.run_id}"}
    assert len({s["ttl_expires_at"] for s in steps}) == 1, "one TTL deadline, never extended"


async def test_max_concurrent_activities_and_worker_sessions_hold(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    queue = _queue()
    async with (
        _worker(client, queue, "g1", worker_sessions=True, max_concurrent_worker_sessions=1),
        _worker(client, queue, "g2", worker_sessions=True, max_concurrent_worker_sessions=1),
    ):
        first = await client.start_workflow("SessionFanout", 4, 1, id="f1", task_queue=queue)
        second = await client.start_workflow("SessionFanout", 4, 1, id="f2", task_queue=queue)
        one, two = await first.result(timeout=60), await second.result(timeout=60)
    # Each session's four activities ran one at a time on one worker.
    assert {r["peak"] for r in one} == {1} and {r["peak"] for r in two} == {1}
    assert session_app.peak(f"run:{first.run_id}") == 1
    holders = {r["holder"] for r in one}, {r["holder"] for r in two}
    assert all(len(h) == 1 for h in holders)
    # One session slot each: both sessions were live at once, so they went to both.
    assert holders[0] | holders[1] == {"g1", "g2"}


async def test_a_killed_holders_session_moves_keeping_its_ttl(
    served: tuple[ServerProcess, Client], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = served
    queue = _queue()
    log = tmp_path / "executions.log"
    log.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(log))
    monkeypatch.setenv("SESSION_APP_BLOCK", "b")
    holder = WorkerProcess(server.address, queue, tmp_path, "first", module="tests.e2e.session_app")
    monkeypatch.delenv("SESSION_APP_BLOCK")
    try:
        handle = await client.start_workflow("SessionFailover", id="failover", task_queue=queue)

        async def blocked() -> bool:
            return "start:b" in log.read_text()

        await eventually(blocked, what="the holder to start step b")
        before = await _describe(client, f"run:{handle.run_id}")
        assert (before.state, before.holder_worker_id, before.generation) == (
            "active",
            "first",
            1,
        )
        holder.kill()
    finally:
        holder.stop()
    async with _worker(client, queue, "second", worker_sessions=True, capabilities=GPU):
        a, b = await handle.result(timeout=60)
    assert (a["holder"], a["generation"]) == ("first", 1)
    assert (b["holder"], b["generation"], b["reacquisitions"]) == ("second", 2, 1)
    assert b["ttl_expires_at"] == a["ttl_expires_at"], "reacquisition keeps the TTL"


async def test_graceful_shutdown_closes_the_held_sessions(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    queue = _queue()
    async with _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU):
        handle = await client.start_workflow(
            "SessionPipeline", "shared-1", 0, id="shared", task_queue=queue
        )
        await handle.result(timeout=60)
        live = await _describe(client, "shared-1")
        assert (live.state, live.holder_worker_id) == ("active", "gpu")
    closed = await _describe(client, "shared-1")
    assert (closed.state, closed.close_reason) == ("closed", "worker_shutdown")


async def test_the_explicit_handle_creates_renews_and_closes(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    queue = _queue()
    options = SessionOptions(session_id="explicit", lease_seconds=20, ttl_seconds=600)
    worker = _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU)
    async with worker:
        handle = worker.worker_session(options)
        created = await handle.create()
        assert (created.state, created.holder_worker_id, created.generation) == (
            "active",
            "gpu",
            1,
        )
        renewed = await handle.renew()
        assert renewed.lease_expires_at is not None and created.lease_expires_at is not None
        assert renewed.lease_expires_at >= created.lease_expires_at
        assert renewed.ttl_expires_at == created.ttl_expires_at
        run = await client.start_workflow(
            "SessionPipeline", "explicit", 0, id="uses-explicit", task_queue=queue
        )
        steps = (await run.result(timeout=60))[:3]
        assert {(s["holder"], s["generation"]) for s in steps} == {("gpu", 1)}
        closed = await handle.close("done with the model")
        assert (closed.state, closed.close_reason) == ("closed", "done with the model")
        late = await client.start_workflow(
            "SessionProbe", "explicit", id="too-late", task_queue=queue
        )
        outcome, failure_type, message = await late.result(timeout=60)
    assert (outcome, failure_type) == ("failed", "SessionClosed")
    assert "done with the model" in message


async def test_the_ttl_closes_the_session_on_the_database_clock() -> None:
    """A two-hour sleep past a one-hour TTL, in the time-skipping environment: the
    session is closed when the run wakes, and its next activity fails SessionClosed."""
    async with await WorkflowEnvironment.start_time_skipping() as env:
        queue = _queue()
        async with _worker(env.client, queue, "gpu", worker_sessions=True, capabilities=GPU):
            handle = await env.client.start_workflow(
                "SessionOutlived", "brief", 7200, id="outlived", task_queue=queue
            )
            first, failure_type, message = await handle.result(timeout=60)
            closed = await _describe(env.client, "brief")
    assert first["holder"] == "gpu"
    assert failure_type == "SessionClosed"
    assert "ttl_expired" in message
    assert (closed.state, closed.close_reason) == ("closed", "ttl_expired")


async def test_bad_options_get_a_clear_reason(served: tuple[ServerProcess, Client]) -> None:
    _, client = served
    with pytest.raises(ValueError, match="ttl_seconds must be > 0"):
        SessionOptions(ttl_seconds=0)
    with pytest.raises(ValueError, match="lease_seconds must be > 0 and <= ttl_seconds"):
        SessionOptions(lease_seconds=120, ttl_seconds=60)
    with pytest.raises(ValueError, match="max_concurrent_worker_sessions"):
        _worker(client, "q", "w", worker_sessions=True, max_concurrent_worker_sessions=0)
    queue = _queue()
    worker = _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU)
    async with worker:
        stub = session_service_pb2_grpc.WorkerSessionServiceStub(client.channel)
        bad = options_pb2.SessionOptions(session_id="bad", lease_seconds=120, ttl_seconds=60)
        with pytest.raises(Exception) as refused:
            await stub.CreateWorkerSession(
                session_service_pb2.CreateWorkerSessionRequest(
                    worker_id="gpu", task_queue=queue, options=bad
                )
            )
    error = from_rpc_error(refused.value)  # type: ignore[arg-type]
    assert isinstance(error, InvalidSessionOptionsError)
    assert error.reason == "INVALID_SESSION_OPTIONS"
    assert "lease_seconds must be > 0 and <= ttl_seconds (60), got 120" in str(error)


async def test_replaying_changed_session_options_is_nondeterminism() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        queue = _queue()
        async with _worker(env.client, queue, "gpu", worker_sessions=True, capabilities=GPU):
            handle = await env.client.start_workflow(
                "SessionPipeline", None, 0, id="replayed", task_queue=queue
            )
            await handle.result(timeout=60)
        history = history_pb2.History(events=await handle.history())
    scheduled = [e.activity_scheduled for e in history.events if e.activity_scheduled.seq]
    assert {s.options.session.ttl_seconds for s in scheduled[:3]} == {600}
    assert Replayer([SessionPipeline]).replay(history).ok
    replayed = Replayer([SessionPipelineShorterTtl], raise_on_failure=False).replay(history)
    assert replayed.error is not None
    assert "ttl=600s" in str(replayed.error) and "ttl=60s" in str(replayed.error)
