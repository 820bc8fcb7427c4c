"""Retention against real server processes: closed runs past their namespace's retention
are deleted by the server's own loop (NOT_FOUND, no row of them left in any table of the
schema), open and young runs are untouched, and two replicas on one PostgreSQL database
sweep once (the maintenance lease), handing the job over when the holder stops."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from google.protobuf import duration_pb2

from durable_rpc import Client
from durable_rpc.errors import NotFoundError
from durable_rpc.store import open_store
from durable_rpc.v1 import admin_service_pb2
from tests.e2e.conftest import ServerProcess, eventually
from tests.scale import cluster as pg
from tests.scale.procs import PgServerProcess, target
from tests.store.schema_rows import rows_of

pytestmark = pytest.mark.timeout(120)

#: The loop looks this often (seconds): short, so the test waits little.
INTERVAL = "0.2"


async def set_retention(client: Client, namespace: str, ms: int, *, create: bool) -> None:
    retention = duration_pb2.Duration()
    retention.FromMilliseconds(ms)
    if create:
        await client.call(
            client.admin_service.CreateNamespace,
            admin_service_pb2.CreateNamespaceRequest(namespace=namespace, retention=retention),
        )
    else:
        await client.call(
            client.admin_service.UpdateNamespace,
            admin_service_pb2.UpdateNamespaceRequest(namespace=namespace, retention=retention),
        )


async def closed_runs(client: Client, prefix: str, count: int) -> list[str]:
    """Runs with search attributes and a signal, terminated (by a batch)."""
    run_ids = []
    for i in range(count):
        handle = await client.start_workflow(
            "Expiring",
            id=f"{prefix}-{i}",
            task_queue="retention-q",
            search_attributes={"Wave": prefix},
        )
        await handle.signal("poke", i, request_id=f"{prefix}-sig-{i}")
        assert handle.run_id is not None
        run_ids.append(handle.run_id)
    done = await client.batch_terminate(f'Wave = "{prefix}"', batch_id=prefix, max_per_second=1000)
    assert done.applied == count
    return run_ids


async def gone(client: Client, workflow_id: str, run_id: str) -> bool:
    try:
        await client.get_handle(workflow_id, run_id).describe()
    except NotFoundError:
        return True
    return False


async def all_gone(client: Client, prefix: str, run_ids: list[str]) -> bool:
    for i, run_id in enumerate(run_ids):
        if not await gone(client, f"{prefix}-{i}", run_id):
            return False
    return True


def deleted_by(log: Path) -> int:
    return sum(int(n) for n in re.findall(r"retention: deleted (\d+) closed runs", log.read_text()))


async def test_the_server_deletes_expired_runs_and_nothing_else(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "durable.db", tmp_path / "server.log", "--retention-interval", INTERVAL
    )
    server.start()
    reader = open_store(f"sqlite:///{tmp_path / 'durable.db'}")
    await reader.open()
    try:
        async with await Client.connect(server.address) as client:
            await set_retention(client, "default", 1000, create=False)
            await set_retention(client, "keep", 7 * 86_400_000, create=True)
            open_handle = await client.start_workflow(
                "Expiring", id="open", task_queue="retention-q"
            )
            async with await Client.connect(server.address, namespace="keep") as keep:
                young = await keep.start_workflow("Expiring", id="young", task_queue="q")
                await young.terminate("young")
            expiring = await closed_runs(client, "old", 12)
            kept = [open_handle.run_id, young.run_id]
            assert None not in kept
            kept_rows = await rows_of(reader, False, kept)  # type: ignore[arg-type]
            assert await rows_of(reader, False, expiring)

            await eventually(
                lambda: all_gone(client, "old", expiring), timeout=30, what="expired runs gone"
            )

            assert await rows_of(reader, False, expiring) == {}
            assert await rows_of(reader, False, kept) == kept_rows  # type: ignore[arg-type]
            assert (await open_handle.describe()).info.status == "running"
            async with await Client.connect(server.address, namespace="keep") as keep:
                assert (await keep.get_handle("young").describe()).info.status == "terminated"
            listed = [info.workflow_id async for info in client.list_workflows()]
            assert listed == ["open"]
        assert deleted_by(server.log_path) == 12
    finally:
        await reader.close()
        server.stop()


@pytest.mark.skipif(not pg.available(), reason="needs a PostgreSQL cluster")
async def test_two_replicas_on_one_database_sweep_once(tmp_path: Path) -> None:
    cluster = pg.require_cluster()
    url = cluster.create_database()
    replicas = [
        PgServerProcess(url, tmp_path / f"replica-{i}.log", "--retention-interval", INTERVAL)
        for i in range(2)
    ]
    reader = open_store(url)
    try:
        for replica in replicas:
            replica.start()
        await reader.open()
        async with await Client.connect(target(*replicas)) as client:
            await set_retention(client, "default", 1000, create=False)
            first = await closed_runs(client, "first", 10)
            await eventually(lambda: all_gone(client, "first", first), timeout=30, what="wave 1")
            second = await closed_runs(client, "second", 10)
            await eventually(lambda: all_gone(client, "second", second), timeout=30, what="wave 2")
            assert await rows_of(reader, True, first + second) == {}
            # One replica held the lease and did both sweeps; the other deleted nothing.
            counts = [deleted_by(r.log_path) for r in replicas]
            assert sorted(counts) == [0, 20], counts
            holder = counts.index(20)

            # The holder stops (giving the lease up): the other replica takes the job over.
            replicas[holder].terminate()
            async with await Client.connect(replicas[1 - holder].address) as other:
                third = await closed_runs(other, "third", 5)
                await eventually(lambda: all_gone(other, "third", third), timeout=30, what="wave 3")
            assert deleted_by(replicas[1 - holder].log_path) == 5
            assert deleted_by(replicas[holder].log_path) == 20
    finally:
        await reader.close()
        for replica in replicas:
            replica.stop()
        cluster.drop_database(url)
