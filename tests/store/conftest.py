"""Store fixtures, parametrized by backend.

Every store test runs against every backend family available:

- SQLite, twice: a real database file in tmp_path and ``sqlite://:memory:``;
- PostgreSQL, when a cluster is available (``DURABLE_RPC_TEST_PG_URL``, which
  scripts/test.sh exports; under ``CI=true`` it must be), each test on a fresh database.

DURABLE_RPC_TEST_STORE narrows the run: "sqlite" (the default: SQLite, plus PostgreSQL
when a URL is set; engine-specific SQLite tests run) or "postgres" (PostgreSQL only; a
throwaway cluster is started when no URL is set). Tests that reopen a database use the
``durable_backend`` fixture (a file for SQLite, the test's database for PostgreSQL).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from durable_rpc.store import Store, StoreOptions, open_store
from tests.scale import cluster as pg
from tests.store.helpers import RecordingListener

BACKEND = os.environ.get("DURABLE_RPC_TEST_STORE", "sqlite")

#: Small backoffs so failure paths finish quickly.
FAST = StoreOptions(workflow_task_initial_backoff_ms=20, workflow_task_max_backoff_ms=200)


@dataclass(frozen=True)
class Backend:
    name: str
    url: str
    #: A new Store on the same URL sees the same data (files, servers; not :memory:).
    durable: bool
    path: Path | None = None

    def make(self, options: StoreOptions | None = FAST) -> Store:
        return open_store(self.url, options)


def _variants() -> list[str]:
    if BACKEND == "sqlite":
        return ["sqlite-file", "sqlite-memory", *(["postgres"] if pg.available() else [])]
    if BACKEND == "postgres":
        return ["postgres"]
    raise pytest.UsageError(
        f"unknown DURABLE_RPC_TEST_STORE={BACKEND!r} (supported: sqlite, postgres)"
    )


def _backend(variant: str, tmp_path: Path) -> Iterator[Backend]:
    if variant == "sqlite-file":
        path = tmp_path / "store.db"
        yield Backend(variant, f"sqlite:///{path}", durable=True, path=path)
    elif variant == "sqlite-memory":
        yield Backend(variant, "sqlite://:memory:", durable=False)
    elif variant == "postgres":
        cluster = pg.require_cluster()
        url = cluster.create_database()
        yield Backend(variant, url, durable=True)
        cluster.drop_database(url)
    else:
        raise AssertionError(variant)


@pytest.fixture(params=_variants())
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request.param, tmp_path)


@pytest.fixture(params=[v for v in _variants() if v != "sqlite-memory"])
def durable_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A backend whose data survives closing the store and opening a new one."""
    yield from _backend(request.param, tmp_path)


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[Store]:
    s = backend.make()
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
def listener(store: Store) -> RecordingListener:
    recorder = RecordingListener()
    store.set_listener(recorder)
    return recorder
