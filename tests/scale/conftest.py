"""Fixtures for the scale-out tests: the PostgreSQL cluster, a fresh database per test,
and stores ("replicas" in one process) on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from durable_rpc.store import Store, StoreOptions, open_store
from tests.e2e.conftest import spawn_worker  # noqa: F401 (a fixture, re-exported)
from tests.scale.cluster import Cluster, require_cluster
from tests.scale.procs import PgServerProcess

OpenPg = Callable[..., Awaitable[Store]]

FAST = StoreOptions(workflow_task_initial_backoff_ms=20, workflow_task_max_backoff_ms=200)


@pytest.fixture
def pg_cluster() -> Cluster:
    return require_cluster()


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    url = pg_cluster.create_database()
    yield url
    pg_cluster.drop_database(url)


@pytest.fixture
async def open_pg(pg_url: str) -> AsyncIterator[Callable[..., Awaitable[Store]]]:
    """Opens stores on the test's database (closed at the end)."""
    opened: list[Store] = []

    async def make(options: StoreOptions = FAST, url: str | None = None) -> Store:
        store = open_store(url or pg_url, options)
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
def test_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Activities of tests/e2e/apps.py append one line per execution here."""
    path = tmp_path / "executions.log"
    path.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(path))
    return path


@pytest.fixture
def replicas(pg_url: str, tmp_path: Path) -> Iterator[Callable[[int], list[PgServerProcess]]]:
    """Starts server replicas on the test's database (stopped at the end)."""
    started: list[PgServerProcess] = []

    def start(count: int) -> list[PgServerProcess]:
        new = [
            PgServerProcess(pg_url, tmp_path / f"replica-{len(started) + i}.log")
            for i in range(count)
        ]
        for replica in new:
            replica.start()
            started.append(replica)
        return new

    yield start
    for replica in started:
        replica.stop()
