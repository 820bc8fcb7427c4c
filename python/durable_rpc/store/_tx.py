"""The small transaction surface the dialect-independent operations are written against.

SQL uses ``?`` placeholders, ``RETURNING``, partial indexes and ``INSERT ... SELECT ...
WHERE NOT EXISTS``: a subset SQLite and PostgreSQL share (a PostgreSQL adapter rewrites
the placeholders). Dialect-specific fragments are attributes of the transaction.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from durable_rpc.store._api import RunOutcome, StoreListener, TaskKind

Row = dict[str, Any]
T = TypeVar("T")


@dataclass(slots=True)
class Notes:
    """Listener notifications an operation produced; delivered only after its commit."""

    tasks: set[tuple[str, str, TaskKind]] = field(default_factory=set)
    due: set[int] = field(default_factory=set)
    closed: list[tuple[str, str]] = field(default_factory=list)
    #: Outcomes of the runs closed here, by (namespace, run id): long polls for a result
    #: answer from them without reading the store again (not sent to other replicas).
    outcomes: dict[tuple[str, str], RunOutcome] = field(default_factory=dict)

    def deliver(self, listener: StoreListener) -> None:
        for namespace, task_queue, kind in sorted(self.tasks):
            listener.tasks_available(namespace, task_queue, kind)
        if self.due:
            listener.due_at(min(self.due))
        for namespace, run_id in self.closed:
            listener.run_closed(namespace, run_id, self.outcomes.get((namespace, run_id)))


class Tx(abc.ABC):
    """One operation's view of the open transaction."""

    #: Appended to the candidate SELECT of a claim (PostgreSQL: FOR UPDATE SKIP LOCKED).
    claim_lock_suffix: str = ""
    #: Appended to a write operation's read of a row it then changes based on what it read
    #: (PostgreSQL: FOR UPDATE, so a concurrent change is waited for and seen; SQLite
    #: serializes writers anyway). Empty in read transactions.
    row_lock_suffix: str = ""

    def __init__(self, known_namespaces: set[str] | None = None) -> None:
        self.notes = Notes()
        # History appends are written in one go per run (``flush_events``) rather than two
        # statements per event: the length each run's history has in this transaction,
        # buffered appends included, and the rows not yet written.
        self._history_lengths: dict[tuple[str, str], int] = {}
        self._unwritten: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
        # Each run's history length before this transaction appended, and what it appended
        # (namespace, run id, event id, kind): enough to answer "did an event of these kinds
        # follow event N" without a query when every earlier event is older than N.
        self._history_bases: dict[tuple[str, str], int] = {}
        self._appended_events: list[tuple[str, str, int, str, bytes]] = []
        # Activity tasks this transaction queued, by (namespace, run id, seq): the claim
        # columns of their rows, so an eager claim of them needs no candidate query.
        self.queued_activities: dict[tuple[str, str, int], Row] = {}
        # Events this operation appended, as (run_id, serialized HistoryEvent), in order:
        # a sticky worker extends its copy of the history with them.
        self.appended: list[tuple[str, bytes]] = []
        # Namespaces this store has already seen exist (shared by its transactions).
        # Namespaces are never deleted, so a positive answer can be remembered and the
        # existence check, once per operation, skipped.
        self.known_namespaces: set[str] = (
            known_namespaces if known_namespaces is not None else set()
        )

    @abc.abstractmethod
    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Executes a statement; returns its rows."""

    @abc.abstractmethod
    def _execute(self, sql: str, params: Sequence[Any]) -> int:
        """Executes a statement; returns the number of rows it changed."""

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self._flush_before(sql)
        return self._fetch(sql, params)

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self._flush_before(sql)
        rows = self._fetch(sql, params)
        return rows[0] if rows else None

    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Executes a statement; returns the number of rows it changed."""
        self._flush_before(sql)
        return self._execute(sql, params)

    @abc.abstractmethod
    def now_ms(self) -> int:
        """The database clock, read inside this transaction."""

    def value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.one(sql, params)
        if row is None:
            return None
        return row[next(iter(row.keys()))]

    def perform(self, fn: Callable[[Tx], T]) -> T:
        """Runs an operation's function in this transaction and writes what it buffered."""
        result = fn(self)
        self.flush_events()
        return result

    # -- history appends ------------------------------------------------------------------

    def remember_run(self, row: Row | None) -> None:
        """Notes the history length of a run row this write transaction read under its row
        lock (PostgreSQL: ``row_lock_suffix``; SQLite: the single writer), so appending to
        it needs no read of its own."""
        if row is not None:
            self.remember_history_length(row["namespace"], row["run_id"], row["history_length"])

    def remember_history_length(self, namespace: str, run_id: str, length: int) -> None:
        self._history_lengths[(namespace, run_id)] = length
        self._history_bases.setdefault((namespace, run_id), length)

    def appended_after(
        self, namespace: str, run_id: str, event_id: int, kinds: tuple[str, ...]
    ) -> bool | None:
        """Whether the run has an event of ``kinds`` after ``event_id``, answered from
        memory when every event this transaction did not append is at most ``event_id``;
        None when only the database can tell."""
        base = self._history_bases.get((namespace, run_id))
        if base is None or base > event_id:
            return None
        return any(
            (ns, run) == (namespace, run_id) and appended_id > event_id and kind in kinds
            for ns, run, appended_id, kind, _ in self._appended_events
        )

    def whole_history(self, namespace: str, run_id: str) -> list[bytes] | None:
        """The run's serialized events when this transaction appended all of them (it
        created the run); None otherwise."""
        if self._history_bases.get((namespace, run_id)) != 0:
            return None
        return [
            data
            for ns, run, _, _, data in self._appended_events
            if (ns, run) == (namespace, run_id)
        ]

    def next_event_id(self, namespace: str, run_id: str) -> int:
        """Reserves the run's next event id (its history length + 1 in this transaction)."""
        key = (namespace, run_id)
        length = self._history_lengths.get(key)
        if length is None:
            # No flush first: other runs' buffered rows do not change this run's length.
            rows = self._fetch(
                "SELECT history_length FROM runs WHERE namespace = ? AND run_id = ?"
                f"{self.row_lock_suffix}",
                key,
            )
            assert rows, f"append to unknown run {run_id!r}"
            length = int(rows[0]["history_length"])
            self._history_bases.setdefault(key, length)
        self._history_lengths[key] = length + 1
        return length + 1

    def add_event(
        self, namespace: str, run_id: str, event_id: int, kind: str, time_ms: int, data: bytes
    ) -> None:
        """Buffers one history row; written before the next statement that reads history
        or runs, and at the end of the operation."""
        self._unwritten.setdefault((namespace, run_id), []).append(
            (namespace, run_id, event_id, kind, time_ms, data)
        )
        self._appended_events.append((namespace, run_id, event_id, kind, data))
        self.appended.append((run_id, data))

    def flush_events(self) -> None:
        """Writes the buffered history rows and the new history lengths (called before a
        statement that could read them and when the operation's function returns)."""
        unwritten, self._unwritten = self._unwritten, {}
        for (namespace, run_id), rows in unwritten.items():
            self._write_events(namespace, run_id, self._history_lengths[(namespace, run_id)], rows)

    def _write_events(
        self, namespace: str, run_id: str, length: int, rows: list[tuple[Any, ...]]
    ) -> None:
        self._execute(
            "UPDATE runs SET history_length = ? WHERE namespace = ? AND run_id = ?",
            (length, namespace, run_id),
        )
        placeholders = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows))
        self._execute(
            "INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, data) "
            f"VALUES {placeholders}",
            [value for row in rows for value in row],
        )

    def _flush_before(self, sql: str) -> None:
        # Only statements naming these tables can see the buffered rows or lengths.
        if self._unwritten and ("history" in sql or "runs" in sql):
            self.flush_events()
