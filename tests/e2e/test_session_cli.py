"""Worker sessions for operators, through the CLI (a child process) against real servers
(SQLite and PostgreSQL) and an in-process worker: ``durable-rpc session describe`` shows
one session's holder, lease, TTL and close reason; ``session list QUEUE`` the queue's
open sessions, by id, a page at a time."""

from __future__ import annotations

import json
import uuid

import pytest

from durable_rpc import Client
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.sessions import SessionOptions
from durable_rpc.v1 import session_service_pb2, session_service_pb2_grpc
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ServerProcess
from tests.e2e.session_app import GPU
from tests.e2e.test_sessions import _worker, served

__all__ = ["served"]  # the fixture, shared with test_sessions.py

pytestmark = pytest.mark.timeout(180)

#: A terminal wide enough for the list's table (rich wraps to $COLUMNS).
WIDE = {"COLUMNS": "250"}


async def test_session_describe_and_list_through_the_cli(
    served: tuple[ServerProcess, Client],
) -> None:
    server, client = served
    suffix = uuid.uuid4().hex[:8]
    queue = f"q-{suffix}"
    worker = _worker(client, queue, "gpu", worker_sessions=True, capabilities=GPU)
    async with worker:
        model = worker.worker_session(
            SessionOptions(session_id=f"b-model-{suffix}", requires=GPU, ttl_seconds=600)
        )
        await model.create()
        scratch = worker.worker_session(SessionOptions(session_id=f"a-scratch-{suffix}"))
        await scratch.create()
        run = await client.start_workflow(
            "SessionPipeline", None, 0, id=f"cli-{suffix}", task_queue=queue
        )
        await run.result(timeout=60)
        own = f"run:{run.run_id}"

        shown = await run_cli_async("session", "describe", own, "--json", address=server.address)
        assert shown.returncode == 0, shown.stderr
        session = json.loads(shown.stdout)["session"]
        assert (session["sessionId"], session["taskQueue"], session["state"]) == (
            own,
            queue,
            "active",
        )
        assert (session["holderWorkerId"], session["generation"]) == ("gpu", "1")
        assert session["options"]["requires"] == GPU
        assert "leaseExpiresAt" in session and "ttlExpiresAt" in session

        text = await run_cli_async("session", "describe", model.session_id, address=server.address)
        assert text.returncode == 0, text.stderr
        lines = {
            line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in text.stdout.splitlines()
            if line.count("│") == 3
        }
        assert (lines["state"], lines["holder"], lines["requires"]) == ("active", "gpu", "gpu=a100")

        listed = await run_cli_async("session", "list", queue, "--json", address=server.address)
        assert listed.returncode == 0, listed.stderr
        ids = [s["sessionId"] for s in json.loads(listed.stdout)["sessions"]]
        assert ids == sorted([own, model.session_id, scratch.session_id])

        first = await run_cli_async(
            "session", "list", queue, "--limit", "1", address=server.address, env=WIDE
        )
        assert first.returncode == 0, first.stderr
        assert "a-scratch" in first.stdout and "more than 1" in first.stdout

        await scratch.close("operator test")
        closed = await run_cli_async(
            "session", "describe", scratch.session_id, "--json", address=server.address
        )
        assert json.loads(closed.stdout)["session"]["closeReason"] == "operator test"
        # A closed session is no longer listed.
        after = await run_cli_async("session", "list", queue, "--json", address=server.address)
        assert scratch.session_id not in after.stdout and model.session_id in after.stdout

    missing = await run_cli_async("session", "describe", "no-such", address=server.address)
    assert missing.returncode == 1
    assert "no worker session 'no-such'" in missing.stderr
    assert "Traceback" not in missing.stderr


async def test_listing_sessions_refuses_a_bad_page_size(
    served: tuple[ServerProcess, Client],
) -> None:
    _, client = served
    stub = session_service_pb2_grpc.WorkerSessionServiceStub(client.channel)
    with pytest.raises(Exception) as refused:
        await stub.ListWorkerSessions(
            session_service_pb2.ListWorkerSessionsRequest(task_queue="q", page_size=1001)
        )
    error = from_rpc_error(refused.value)  # type: ignore[arg-type]
    assert isinstance(error, InvalidArgumentError)
    assert "page_size must be in 1..1000" in str(error)
