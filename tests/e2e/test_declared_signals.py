"""Declared signals end to end: a real worker registers what its workflow reads, and the
real server refuses (SIGNAL_NOT_DECLARED) a signal the run's code does not read, for
SignalWorkflow and SignalWithStartWorkflow alike, while declared ones are delivered. On
a SQLite and a PostgreSQL server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_rpc import Client, Worker, workflow
from durable_rpc.errors import SignalNotDeclaredError
from tests.e2e.conftest import ServerProcess
from tests.scale import cluster as pg


@workflow.defn(name="Approval", signals=["note"])
class Approval:
    def __init__(self) -> None:
        self.approved = False
        self.notes: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        workflow.set_signal_handler("note", self.notes.append)  # declared by signals=
        await workflow.wait_condition(lambda: self.approved)
        return self.notes

    @workflow.signal
    def approve(self) -> None:
        self.approved = True


@workflow.defn(name="Anything", dynamic_signals=True)
class Anything:
    def __init__(self) -> None:
        self.seen: list[str] = []

    @workflow.run
    async def run(self) -> list[str]:
        workflow.set_signal_handler("whatever", lambda: self.seen.append("whatever"))
        await workflow.wait_condition(lambda: bool(self.seen))
        return self.seen


@pytest.fixture(params=["sqlite", *(["postgres"] if pg.available() else [])])
async def store_client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Client]:
    url = pg.require_cluster().create_database() if request.param == "postgres" else None
    # A later --db overrides the fixture's SQLite file.
    extra = ("--db", url) if url is not None else ()
    server = ServerProcess(tmp_path / "durable.db", tmp_path / "server.log", *extra)
    server.start()
    try:
        async with await Client.connect(server.address) as client:
            yield client
    finally:
        server.stop()
        if url is not None:
            pg.require_cluster().drop_database(url)


async def test_undeclared_signals_are_refused_declared_ones_delivered(
    store_client: Client,
) -> None:
    client = store_client
    queue = f"q-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[Approval, Anything]):
        handle = await client.start_workflow("Approval", id="order-1", task_queue=queue)
        with pytest.raises(SignalNotDeclaredError) as caught:
            await handle.signal("aprove")
        assert caught.value.reason == "SIGNAL_NOT_DECLARED"
        assert "'aprove'" in caught.value.message
        assert "'approve', 'note'" in caught.value.message
        with pytest.raises(SignalNotDeclaredError):
            await client.signal_with_start_workflow(
                "Approval", id="order-1", task_queue=queue, signal="aprove"
            )
        with pytest.raises(SignalNotDeclaredError):  # and when it would start the run
            await client.signal_with_start_workflow(
                "Approval", id="order-2", task_queue=queue, signal="typo"
            )
        await client.signal_with_start_workflow(
            "Approval", id="order-1", task_queue=queue, signal="note", signal_args=["rush"]
        )
        await handle.signal("approve")
        assert await handle.result(timeout=30) == ["rush"]

        # Dynamic signals opt out: any name is accepted.
        anything = await client.start_workflow("Anything", id="any-1", task_queue=queue)
        await anything.signal("whatever")
        assert await anything.result(timeout=30) == ["whatever"]
