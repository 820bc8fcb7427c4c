"""SQLite engine properties: group commit, durability, migrations, unusable files,
query plans, URLs. (Backend-specific; the behaviour tests live in the other modules.)"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_rpc.errors import (
    InvalidArgumentError,
    StoreUnavailableError,
    WorkflowAlreadyStartedError,
)
from durable_rpc.store import RunOutcome, SQLiteStore, Store, StoreOptions, open_store
from durable_rpc.store._migrations import SQLITE_MIGRATIONS
from tests.store.conftest import BACKEND, FAST
from tests.store.helpers import (
    NS,
    QUEUE,
    activity_options,
    claim,
    complete,
    failure,
    history,
    kinds,
    payload,
    schedule,
    start,
    timer,
    wait_db_time,
)

pytestmark = pytest.mark.skipif(BACKEND != "sqlite", reason="SQLite engine tests")

UNAVAILABLE_WITHIN_S = 10


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "store.db"


@pytest.fixture
async def file_store(db_path: Path) -> AsyncIterator[Store]:
    db_path.parent.mkdir()
    s = SQLiteStore(str(db_path), FAST)
    await s.open()
    yield s
    await s.close()


def run_ids_in_file(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT run_id FROM runs")}
    finally:
        conn.close()


async def test_group_commit_and_durability(file_store: Store, db_path: Path) -> None:
    store = file_store
    results = await asyncio.gather(*(start(store, f"wf-{i}") for i in range(200)))
    assert len(set(results)) == 200
    stats = store.stats
    assert stats.operations >= 200
    assert stats.transactions < stats.operations / 2, stats
    # Everything acknowledged is in the file, visible to an independent connection.
    assert set(results) <= run_ids_in_file(db_path)
    await store.close()

    reopened = SQLiteStore(str(db_path), FAST)
    await reopened.open()
    try:
        runs, _ = await reopened.list_runs(NS, "running", None, None, None, 1000, None)
        assert {r.run_id for r in runs} == set(results)
        assert kinds(await history(reopened, "wf-7")) == ["workflow_started"]
    finally:
        await reopened.close()


async def test_a_failing_operation_rolls_back_alone(file_store: Store) -> None:
    store = file_store
    # Pairs racing for the same workflow id: one of each pair fails inside the batch.
    outcomes = await asyncio.gather(
        *(start(store, f"wf-{i // 2}", request_id=f"req-{i}") for i in range(100)),
        return_exceptions=True,
    )
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 50
    assert all(isinstance(f, WorkflowAlreadyStartedError) for f in failures)
    assert store.stats.failed_operations >= 50
    assert store.stats.transactions < 100
    runs, _ = await store.list_runs(NS, None, None, None, None, 1000, None)
    assert sorted(r.workflow_id for r in runs) == sorted({f"wf-{i}" for i in range(50)})
    for run in runs:
        assert run.history_length == 1


async def test_everything_acknowledged_survives_reopen(db_path: Path) -> None:
    db_path.parent.mkdir()
    store = SQLiteStore(str(db_path), FAST)
    await store.open()
    await start(store, "wf-1")
    task = await claim(store, lease_ms=60_000)
    await store.complete_workflow_task(NS, task.lease, 1, [schedule(1), timer(2, 60_000)])
    activity = await store.claim_activity_task(NS, QUEUE, "aw1", [])
    assert activity is not None
    await store.signal_workflow(NS, "wf-1", None, "s", payload(b"x"), "sig-1")
    before = await history(store)
    description = await store.describe(NS, "wf-1", None)
    await store.close()

    store = SQLiteStore(str(db_path), FAST)
    await store.open()
    try:
        assert await history(store) == before
        assert await store.describe(NS, "wf-1", None) == description
        # The activity lease is still held: fenced writes from its owner work after restart.
        await store.complete_activity_task(NS, activity.lease, payload(b"ok"))
        assert not await store.signal_workflow(NS, "wf-1", None, "s", payload(b"x"), "sig-1")
        assert (await store.process_due()).next_due_ms is not None
        wft = await claim(store)
        assert kinds(wft.events)[-2:] == ["signal_received", "activity_completed"]
    finally:
        await store.close()


async def test_close_drains_pending_operations(db_path: Path) -> None:
    db_path.parent.mkdir()
    store = SQLiteStore(str(db_path), FAST)
    await store.open()
    pending = [asyncio.create_task(start(store, f"wf-{i}")) for i in range(50)]
    await asyncio.sleep(0)  # let every task enqueue its operation
    await store.close()
    run_ids = await asyncio.gather(*pending)
    assert set(run_ids) == run_ids_in_file(db_path)
    with pytest.raises(StoreUnavailableError):
        await start(store, "after-close")
    with pytest.raises(StoreUnavailableError):
        await store.describe(NS, "wf-1", None)


async def test_migrations_are_versioned_and_applied_once(db_path: Path) -> None:
    db_path.parent.mkdir()
    for _ in range(2):
        store = SQLiteStore(str(db_path), FAST)
        await store.open()
        await store.close()
    conn = sqlite3.connect(db_path)
    try:
        versions = [migration.version for migration in SQLITE_MIGRATIONS]
        # Numbered 1..N without gaps, each applied exactly once although the store opened twice.
        assert versions == list(range(1, len(versions) + 1))
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (version,) for version in versions
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT name FROM namespaces").fetchall() == [("default",)]
        conn.execute("INSERT INTO schema_version VALUES (99, 'from the future', 0)")
        conn.commit()
    finally:
        conn.close()
    newer = SQLiteStore(str(db_path), FAST)
    with pytest.raises(StoreUnavailableError, match="newer"):
        await newer.open()


async def assert_unavailable(store: Store) -> None:
    async with asyncio.timeout(UNAVAILABLE_WITHIN_S):
        with pytest.raises(StoreUnavailableError):
            await start(store, "wf-new")
        with pytest.raises(StoreUnavailableError):
            await store.describe(NS, "wf-1", None)
        with pytest.raises(StoreUnavailableError):
            await store.process_due()


async def test_removed_directory_is_unavailable_not_a_hang(
    file_store: Store, db_path: Path
) -> None:
    await start(file_store, "wf-1")
    shutil.rmtree(db_path.parent)
    await assert_unavailable(file_store)
    assert file_store.stats.aborted_batches >= 1


async def test_file_replaced_by_garbage_is_unavailable(file_store: Store, db_path: Path) -> None:
    await start(file_store, "wf-1")
    garbage = db_path.with_name("garbage")
    garbage.write_bytes(os.urandom(64 * 1024))
    os.replace(garbage, db_path)
    await assert_unavailable(file_store)


async def test_unusable_file_at_open(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 1000)
    async with asyncio.timeout(UNAVAILABLE_WITHIN_S):
        with pytest.raises(StoreUnavailableError):
            await SQLiteStore(str(garbage)).open()
        with pytest.raises(StoreUnavailableError):
            await SQLiteStore(str(tmp_path / "missing-dir" / "x.db")).open()


async def test_locked_database_is_unavailable_after_busy_timeout(db_path: Path) -> None:
    db_path.parent.mkdir()
    store = SQLiteStore(str(db_path), StoreOptions(busy_timeout_ms=100))
    await store.open()
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0.1)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        async with asyncio.timeout(UNAVAILABLE_WITHIN_S):
            with pytest.raises(StoreUnavailableError):
                await start(store, "wf-blocked")
        blocker.execute("ROLLBACK")
        # Once the lock is gone the store works again, and the refused start left nothing.
        await start(store, "wf-after")
        runs, _ = await store.list_runs(NS, None, None, None, None, 10, None)
        assert [r.workflow_id for r in runs] == ["wf-after"]
    finally:
        blocker.close()
        await store.close()


async def test_listener_runs_after_commit(file_store: Store, db_path: Path) -> None:
    seen: list[set[str]] = []
    called = asyncio.Event()

    class Checker:
        def tasks_available(self, namespace: str, task_queue: str, kind: str) -> None:
            # An independent connection already sees the change: the commit came first.
            seen.append(run_ids_in_file(db_path))
            called.set()

        def due_at(self, due_ms: int) -> None:
            pass

        def run_closed(
            self, namespace: str, run_id: str, outcome: RunOutcome | None = None
        ) -> None:
            pass

    file_store.set_listener(Checker())
    run_id = await start(file_store, "wf-1")
    async with asyncio.timeout(UNAVAILABLE_WITHIN_S):
        await called.wait()
    assert run_id in seen[0]


def _plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params = [None] * sql.count("?")
    return [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params)]


async def test_hot_queries_use_indexes(db_path: Path) -> None:
    db_path.parent.mkdir()
    statements: set[str] = set()
    store = SQLiteStore(str(db_path), FAST, statement_hook=statements.add)
    await store.open()
    try:
        await start(store, "wf-1")
        task = await claim(store)
        options = activity_options(start_to_close_ms=30, initial_ms=5, schedule_to_close_ms=10_000)
        await store.complete_workflow_task(
            NS, task.lease, 1, [schedule(1, options=options), timer(2, 10)]
        )
        act = await store.claim_activity_task(NS, QUEUE, "aw", ["act"])
        assert act is not None
        await store.heartbeat_activity_task(NS, act.lease, payload(b"d"))
        await store.fail_activity_task(NS, act.lease, failure())
        await wait_db_time(store, act.lease_expires_at_ms + 20)
        await store.process_due()
        act = await store.claim_activity_task(NS, QUEUE, "aw", [])
        assert act is not None
        await store.complete_activity_task(NS, act.lease, payload(b"r"))
        await store.signal_workflow(NS, "wf-1", None, "s", payload(b""), "s1")
        await store.request_cancel(NS, "wf-1", None, "r")
        task = await claim(store, lease_ms=10)
        await wait_db_time(store, task.lease_expires_at_ms + 1)
        await store.process_due()
        task = await claim(store)
        await store.fail_workflow_task(NS, task.lease, failure())
        await store.register_worker(NS, "w", QUEUE, [("Order", "1", "fp")], ["act"], "b", False)
        await store.worker_heartbeat(NS, "w")
        await store.describe(NS, "wf-1", None)
        await store.get_history(NS, "wf-1", None, 0, 10)
        await store.get_outcome(NS, "wf-1", None)
        await store.terminate(NS, "wf-1", None, "t")
        await store.list_runs(NS, "terminated", None, None, None, 10, None)
        await store.list_runs(NS, None, "Order", None, None, 10, None)
        await store.list_runs(NS, None, None, None, None, 10, "5")
        await store.deregister_worker(NS, "w")
    finally:
        await store.close()

    conn = sqlite3.connect(db_path)
    try:
        full_scans: dict[str, list[str]] = {}
        for sql in statements:
            if sql.lstrip().upper().startswith("INSERT") and "SELECT" not in sql.upper():
                continue
            plan = _plan(conn, sql)
            scans = [step for step in plan if re.fullmatch(r"SCAN (tasks|history|runs)\b.*", step)]
            # A scan is only acceptable over a (partial) index, never the table itself.
            bad = [step for step in scans if "INDEX" not in step]
            if bad:
                full_scans[sql] = plan
        assert not full_scans, full_scans
        assert len(statements) > 40
    finally:
        conn.close()


def test_open_store_urls(tmp_path: Path) -> None:
    memory = open_store("sqlite://:memory:")
    assert isinstance(memory, SQLiteStore) and memory.path == ":memory:"
    absolute = open_store(f"sqlite:///{tmp_path}/a.db")
    assert isinstance(absolute, SQLiteStore) and absolute.path == f"{tmp_path}/a.db"
    relative = open_store("sqlite:///rel/b.db")
    assert isinstance(relative, SQLiteStore) and relative.path == os.path.abspath("rel/b.db")
    for bad in ("mysql://x/y", "sqlite:/x.db", "sqlite://", "nonsense"):
        with pytest.raises(InvalidArgumentError):
            open_store(bad)


async def test_memory_store_works_and_is_private() -> None:
    a = open_store("sqlite://:memory:", FAST)
    b = open_store("sqlite://:memory:", FAST)
    async with a, b:
        await start(a, "wf-1")
        task = await claim(a)
        await a.complete_workflow_task(NS, task.lease, 1, [complete(1)])
        assert (await a.get_outcome(NS, "wf-1", None)).status == "completed"
        runs, _ = await b.list_runs(NS, None, None, None, None, 10, None)
        assert runs == []
