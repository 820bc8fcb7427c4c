"""History appends are buffered per transaction and written per run in one statement.

The transaction-level tests run ``Tx`` on a bare SQLite connection with just the two
tables involved; the store-level test counts the statements of a real operation."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_rpc.store import SQLiteStore
from durable_rpc.store._sqlite import _SQLiteTx
from durable_rpc.store._tx import Tx
from tests.store.conftest import BACKEND, FAST
from tests.store.helpers import NS, claim, events, history, kinds, schedule, start, timer

INPUTS = ("signal_received", "activity_completed")


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.row_factory = lambda cursor, row: {
        d[0]: v for d, v in zip(cursor.description, row, strict=True)
    }
    conn.executescript(
        "CREATE TABLE runs (namespace TEXT, run_id TEXT, history_length INTEGER, "
        "history_size_bytes INTEGER DEFAULT 0);"
        "CREATE TABLE history (namespace TEXT, run_id TEXT, event_id INTEGER, kind TEXT, "
        "event_time_ms INTEGER, data BLOB, PRIMARY KEY (namespace, run_id, event_id));"
        "INSERT INTO runs VALUES ('ns', 'a', 2, 0), ('ns', 'b', 0, 0);"
        "INSERT INTO history VALUES ('ns', 'a', 1, 'workflow_started', 0, x''), "
        "('ns', 'a', 2, 'signal_received', 0, x'');"
    )
    yield conn
    conn.close()


def _tx(conn: sqlite3.Connection, statements: list[str]) -> Tx:
    return _SQLiteTx(conn, statements.append, now_ms=0)


def _stored(conn: sqlite3.Connection, run_id: str) -> tuple[int, list[tuple[int, str]]]:
    length = conn.execute("SELECT history_length FROM runs WHERE run_id = ?", (run_id,))
    rows = conn.execute(
        "SELECT event_id, kind FROM history WHERE run_id = ? ORDER BY event_id", (run_id,)
    )
    return length.fetchone()["history_length"], [(r["event_id"], r["kind"]) for r in rows]


def test_appends_are_written_per_run_in_one_go(conn: sqlite3.Connection) -> None:
    statements: list[str] = []
    tx = _tx(conn, statements)
    ids = [tx.next_event_id("ns", "a") for _ in range(3)]
    for event_id, kind in zip(
        ids, ("timer_started", "marker_recorded", "timer_started"), strict=True
    ):
        tx.add_event("ns", "a", event_id, kind, 0, b"")
    tx.add_event("ns", "b", tx.next_event_id("ns", "b"), "workflow_started", 0, b"")
    assert ids == [3, 4, 5]
    reads = len(statements)  # one length read per run, nothing written yet
    assert reads == 2 and _stored(conn, "a")[0] == 2
    tx.flush_events()
    writes = statements[reads:]
    assert len(writes) == 4  # per run: the length and one multi-row INSERT
    assert sum(s.startswith("INSERT INTO history") for s in writes) == 2
    stored = [(1, "workflow_started"), (2, "signal_received")]
    appended = [(3, "timer_started"), (4, "marker_recorded"), (5, "timer_started")]
    assert _stored(conn, "a") == (5, [*stored, *appended])
    assert _stored(conn, "b") == (1, [(1, "workflow_started")])
    assert len(tx.appended) == 4


def test_a_read_of_history_or_runs_sees_buffered_appends(conn: sqlite3.Connection) -> None:
    tx = _tx(conn, [])
    tx.add_event("ns", "a", tx.next_event_id("ns", "a"), "timer_started", 0, b"")
    # A statement on another table leaves the buffer alone ...
    assert tx.one("SELECT 1 AS x") == {"x": 1}
    assert _stored(conn, "a")[0] == 2
    # ... one naming history or runs is preceded by the write.
    row = tx.one("SELECT count(*) AS n FROM history WHERE run_id = 'a'")
    assert row == {"n": 3}
    assert tx.value("SELECT history_length FROM runs WHERE run_id = 'a'") == 3
    tx.add_event("ns", "a", tx.next_event_id("ns", "a"), "timer_fired", 0, b"")
    tx.flush_events()
    assert _stored(conn, "a")[1][-2:] == [(3, "timer_started"), (4, "timer_fired")]


def test_a_remembered_run_row_needs_no_length_read(conn: sqlite3.Connection) -> None:
    statements: list[str] = []
    tx = _tx(conn, statements)
    tx.remember_run(
        {"namespace": "ns", "run_id": "a", "history_length": 2, "history_size_bytes": 0}
    )
    assert tx.next_event_id("ns", "a") == 3
    assert statements == []


def test_appended_after_answers_from_memory_only_when_it_knows(
    conn: sqlite3.Connection,
) -> None:
    tx = _tx(conn, [])
    # Nothing known about the run yet: only the database can tell.
    assert tx.appended_after("ns", "a", 2, INPUTS) is None
    tx.add_event("ns", "a", tx.next_event_id("ns", "a"), "activity_completed", 0, b"")
    tx.add_event("ns", "a", tx.next_event_id("ns", "a"), "timer_started", 0, b"")
    # Events 1-2 predate the transaction: after event 1 there may be stored input.
    assert tx.appended_after("ns", "a", 1, INPUTS) is None
    # Every stored event is at most 2: the answer is what this transaction appended.
    assert tx.appended_after("ns", "a", 2, INPUTS) is True
    assert tx.appended_after("ns", "a", 3, INPUTS) is False
    assert tx.appended_after("ns", "a", 3, ("timer_started",)) is True
    tx.flush_events()
    for after in (2, 3):
        stored = tx.one(
            "SELECT 1 AS x FROM history WHERE run_id = 'a' AND event_id > ? "
            "AND kind IN ('signal_received', 'activity_completed')",
            (after,),
        )
        assert (stored is not None) == tx.appended_after("ns", "a", after, INPUTS)


@pytest.mark.skipif(BACKEND != "sqlite", reason="counts SQLite statements")
async def test_a_decision_writes_its_events_in_one_statement(tmp_path: Path) -> None:
    statements: list[str] = []
    store = SQLiteStore(str(tmp_path / "store.db"), FAST, statement_hook=statements.append)
    await store.open()
    try:
        await start(store, "wf-1")
        task = await claim(store)
        statements.clear()
        commands = [schedule(1), schedule(2), timer(3, 60_000), schedule(4)]
        await store.complete_workflow_task(NS, task.lease, 1, commands)
        inserts = [s for s in statements if s.startswith("INSERT INTO history")]
        lengths = [s for s in statements if "SET history_length" in s]
        assert len(inserts) == 1 and len(lengths) == 1
        raw = await history(store)
        assert [e.event_id for e in events(raw)] == list(range(1, len(raw) + 1))
        assert kinds(raw)[-5:] == [
            "workflow_task_completed",
            "activity_scheduled",
            "activity_scheduled",
            "timer_started",
            "activity_scheduled",
        ]
    finally:
        await store.close()


def test_whole_history_only_for_a_run_created_here(conn: sqlite3.Connection) -> None:
    tx = _tx(conn, [])
    conn.execute("INSERT INTO runs VALUES ('ns', 'new', 0, 0)")
    tx.remember_history_length("ns", "new", 0, 0)
    tx.add_event("ns", "new", tx.next_event_id("ns", "new"), "workflow_started", 0, b"s")
    tx.add_event("ns", "a", tx.next_event_id("ns", "a"), "timer_started", 0, b"t")
    tx.add_event("ns", "new", tx.next_event_id("ns", "new"), "workflow_task_scheduled", 0, b"w")
    assert tx.whole_history("ns", "new") == [b"s", b"w"]
    assert tx.whole_history("ns", "a") is None  # events 1-2 are stored, not here
    assert tx.whole_history("ns", "b") is None  # never touched
