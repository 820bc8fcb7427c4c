"""An upgrade over a database an earlier release wrote: tests/fixtures/schema6/schema6.db
is schema version 6 (made by make_fixture.py beside it), its definitions fingerprinted
from the source text, with runs of upgrade_app.py open on a signal and a timer. Today's
server migrates it; a worker of the very same code registers, and the runs finish."""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path
from types import ModuleType

import grpc
import pytest

from durable_rpc import Client, Worker
from durable_rpc.errors import DefinitionChangedError
from durable_rpc.store import SQLiteStore
from durable_rpc.v1 import service_pb2
from durable_rpc.workflow._fingerprint import fingerprint
from tests.e2e.conftest import ServerProcess

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "schema6"


def load(path: Path) -> ModuleType:
    """Import ``path`` as a fresh module (``inspect.getsource`` reads the real file)."""
    name = f"upgrade_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def definitions(db: Path) -> dict[str, tuple[str, str]]:
    """Each definition's (fingerprint, algorithm) as the database holds it."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT name, fingerprint, fingerprint_algorithm FROM definitions")
        return {name: (value, algorithm) for name, value, algorithm in rows}


@pytest.fixture
def upgraded(tmp_path: Path) -> Iterator[ServerProcess]:
    """Today's server on a copy of the schema-6 database."""
    db = tmp_path / "durable.db"
    shutil.copyfile(FIXTURE / "schema6.db", db)
    proc = ServerProcess(db, tmp_path / "server.log")
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
async def upgraded_client(upgraded: ServerProcess) -> AsyncIterator[Client]:
    client = await Client.connect(upgraded.address)
    yield client
    await client.close()


async def test_unchanged_code_registers_and_the_open_runs_finish(
    upgraded: ServerProcess, upgraded_client: Client
) -> None:
    app = load(FIXTURE / "upgrade_app.py")
    async with Worker(
        upgraded_client, task_queue=app.TASK_QUEUE, workflows=[app.Greeting, app.Nap]
    ):
        for workflow_id, name in (("greeting-1", "Ada"), ("greeting-2", "Grace")):
            handle = upgraded_client.get_handle(workflow_id)
            await handle.signal("name", name)
            assert await handle.result() == f"hello, {name}"
        assert await upgraded_client.get_handle("nap-1").result() == "slept 1.0"

    # The records now hold today's fingerprints of the same code, under today's algorithm.
    assert definitions(upgraded.db_path) == {
        "Greeting": (fingerprint(app.Greeting), "syntax-tree-v2"),
        "Nap": (fingerprint(app.Nap), "syntax-tree-v2"),
    }


async def test_the_migration_names_the_source_text_algorithm(tmp_path: Path) -> None:
    """Rows written before migration 7 hold source-text fingerprints, and say so."""
    db = tmp_path / "durable.db"
    shutil.copyfile(FIXTURE / "schema6.db", db)
    with closing(sqlite3.connect(FIXTURE / "schema6.db")) as conn:
        stored = dict(conn.execute("SELECT name, fingerprint FROM definitions").fetchall())
    store = SQLiteStore(str(db))
    await store.open()  # migrates
    await store.close()
    assert definitions(db) == {name: (value, "source-text-v1") for name, value in stored.items()}


async def test_a_real_change_is_refused_naming_every_changed_definition(
    upgraded: ServerProcess, upgraded_client: Client, tmp_path: Path
) -> None:
    source = (FIXTURE / "upgrade_app.py").read_text()
    edited = source.replace('f"{greeting}, {self.names[0]}"', 'f"{greeting}! {self.names[0]}"')
    edited = edited.replace('f"slept {seconds}"', 'f"napped {seconds}"')
    assert edited.count("!") == 1 and "napped" in edited
    (tmp_path / "edited_app.py").write_text(edited)
    app = load(tmp_path / "edited_app.py")
    before = definitions(upgraded.db_path)

    worker = Worker(upgraded_client, task_queue=app.TASK_QUEUE, workflows=[app.Greeting, app.Nap])
    with pytest.raises(DefinitionChangedError) as refused:
        await worker.register()
    message = str(refused.value)
    assert "workflow ('Greeting', version '1') changed its code, and 2 open runs are" in message
    assert "workflow ('Nap', version '1') changed its code, and 1 open run is" in message
    assert "allow_definition_change=True" in message
    # Refused as a whole: neither record was touched.
    assert definitions(upgraded.db_path) == before


async def test_two_fingerprints_under_one_algorithm_are_refused(client: Client) -> None:
    """One code has one fingerprint per algorithm: two are a bad request, not a choice."""
    twice = [
        service_pb2.Fingerprint(algorithm="source-text-v1", value="a" * 64),
        service_pb2.Fingerprint(algorithm="source-text-v1", value="b" * 64),
    ]
    request = service_pb2.RegisterWorkerRequest(
        namespace="default",
        worker_id="w-twice",
        task_queue="upgrade",
        workflows=[
            service_pb2.WorkflowDefinition(
                name="Greeting", version="1", fingerprint="c" * 64, legacy_fingerprints=twice
            )
        ],
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.worker_service.RegisterWorker(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "names algorithm 'source-text-v1' twice" in (refused.value.details() or "")
