"""Store fixtures, parametrized by backend.

DURABLE_RPC_TEST_STORE selects the backend family (default "sqlite"; "postgres" will be
added with that backend). For SQLite every test runs against a real database file in
tmp_path and against ``sqlite://:memory:``; tests that reopen a database use the
``durable_backend`` fixture (a file for SQLite).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from durable_rpc.store import Store, StoreOptions, open_store
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
        return ["sqlite-file", "sqlite-memory"]
    raise pytest.UsageError(f"unknown DURABLE_RPC_TEST_STORE={BACKEND!r} (supported: sqlite)")


def _backend(variant: str, tmp_path: Path) -> Backend:
    if variant == "sqlite-file":
        path = tmp_path / "store.db"
        return Backend(variant, f"sqlite:///{path}", durable=True, path=path)
    if variant == "sqlite-memory":
        return Backend(variant, "sqlite://:memory:", durable=False)
    raise AssertionError(variant)


@pytest.fixture(params=_variants())
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return _backend(request.param, tmp_path)


@pytest.fixture
def durable_backend(tmp_path: Path) -> Backend:
    """A backend whose data survives closing the store and opening a new one."""
    if BACKEND == "sqlite":
        return _backend("sqlite-file", tmp_path)
    raise pytest.UsageError(f"unknown DURABLE_RPC_TEST_STORE={BACKEND!r}")


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
