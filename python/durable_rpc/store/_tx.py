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

from durable_rpc.store._history_buffer import AppendedEvent, HistoryBuffer
from durable_rpc.store._payloads import record_refs
from durable_rpc.store._records import RunOutcome, StoreListener, TaskKind

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
    #: Queries answered, by (namespace, query id).
    answered: list[tuple[str, str]] = field(default_factory=list)
    #: Updates a decision accepted, completed or rejected, by (namespace, update id).
    updates: list[tuple[str, str]] = field(default_factory=list)
    #: API keys created or revoked: replicas that cache keys forget them (PostgreSQL).
    keys: list[str] = field(default_factory=list)
    #: Runs a message stream of which got items, by (namespace, run id).
    streams: list[tuple[str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        """Whether there is anything to deliver (outcomes ride along with ``closed``)."""
        return bool(
            self.tasks
            or self.due
            or self.closed
            or self.answered
            or self.updates
            or self.keys
            or self.streams
        )

    def deliver(self, listener: StoreListener) -> None:
        for namespace, task_queue, kind in sorted(self.tasks):
            listener.tasks_available(namespace, task_queue, kind)
        if self.due:
            listener.due_at(min(self.due))
        for namespace, run_id in self.closed:
            listener.run_closed(namespace, run_id, self.outcomes.get((namespace, run_id)))
        for namespace, query_id in self.answered:
            listener.query_answered(namespace, query_id)
        for namespace, update_id in self.updates:
            listener.update_changed(namespace, update_id)
        for namespace, run_id in self.streams:
            listener.stream_appended(namespace, run_id)


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
        # statements per event.
        self.history = HistoryBuffer()
        # Activity tasks this transaction queued, by (namespace, run id, seq): the claim
        # columns of their rows, so an eager claim of them needs no candidate query.
        self.queued_activities: dict[tuple[str, str, int], Row] = {}
        # Input events a decision's commands caused in its own run (a child started, a
        # signal delivered or not): replay needs a task's command events together behind
        # its marker, so these are appended after the last command (``decision_input``).
        self.decision_inputs: list[Callable[[], None]] = []
        # Starts this transaction deferred by their namespace's admission (``_admission``):
        # the operation adds them to StoreStats (a deferral is counted, never silent).
        self.deferred_starts = 0
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

    def now_sql(self) -> str:
        """The database clock as SQL for one statement: the transaction's ``now_ms``, or,
        where reading it would cost a round trip of its own (PostgreSQL without a
        transaction), the clock expression evaluated by the statement itself."""
        return str(int(self.now_ms()))

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

    @property
    def appended(self) -> list[tuple[str, bytes]]:
        """Events this operation appended, as (run_id, serialized HistoryEvent), in order:
        a sticky worker extends its copy of the history with them."""
        return [(e.run_id, e.data) for e in self.history.events]

    def remember_run(self, row: Row | None) -> None:
        """Notes the history length of a run row this write transaction read under its row
        lock (PostgreSQL: ``row_lock_suffix``; SQLite: the single writer), so appending to
        it needs no read of its own."""
        if row is not None:
            self.remember_history_length(
                row["namespace"], row["run_id"], row["history_length"], row["history_size_bytes"]
            )

    def remember_history_length(
        self, namespace: str, run_id: str, length: int, size_bytes: int
    ) -> None:
        self.history.remember((namespace, run_id), length, size_bytes)

    def history_totals(self, namespace: str, run_id: str) -> tuple[int, int]:
        """The run's history (length, size in bytes), this transaction's appends included
        (what the history limits are checked against)."""
        key = (namespace, run_id)
        if self.history.known_length(key) is None:
            self._read_totals(key)
        totals = self.history.totals(key)
        assert totals is not None
        return totals

    def _read_totals(self, key: tuple[str, str]) -> None:
        # No flush first: other runs' buffered rows do not change this run's totals.
        rows = self._fetch(
            "SELECT history_length, history_size_bytes FROM runs "
            f"WHERE namespace = ? AND run_id = ?{self.row_lock_suffix}",
            key,
        )
        assert rows, f"append to unknown run {key[1]!r}"
        self.history.remember(
            key, int(rows[0]["history_length"]), int(rows[0]["history_size_bytes"])
        )

    def appended_after(
        self, namespace: str, run_id: str, event_id: int, kinds: tuple[str, ...]
    ) -> bool | None:
        """See ``HistoryBuffer.appended_after``."""
        return self.history.appended_after((namespace, run_id), event_id, kinds)

    def whole_history(self, namespace: str, run_id: str) -> list[bytes] | None:
        """See ``HistoryBuffer.whole_history``."""
        return self.history.whole_history((namespace, run_id))

    def next_event_id(self, namespace: str, run_id: str) -> int:
        """Reserves the run's next event id (its history length + 1 in this transaction)."""
        key = (namespace, run_id)
        if self.history.known_length(key) is None:
            self._read_totals(key)
        return self.history.reserve(key)

    def add_event(
        self, namespace: str, run_id: str, event_id: int, kind: str, time_ms: int, data: bytes
    ) -> None:
        """Buffers one history row; written before the next statement that reads history
        or runs, and at the end of the operation."""
        self.history.add(AppendedEvent(namespace, run_id, event_id, kind, time_ms, data))

    def flush_events(self) -> None:
        """Writes the buffered history rows and the new history lengths (called before a
        statement that could read them and when the operation's function returns)."""
        for (namespace, run_id), length, size, events in self.history.take_unwritten():
            self._write_events(namespace, run_id, length, size, [e.row for e in events])
            # The payloads these events reference are held for the run (and checked to
            # exist) in this same transaction: every history write passes here.
            record_refs(self, namespace, run_id, [e.data for e in events])

    def _write_events(
        self, namespace: str, run_id: str, length: int, size: int, rows: list[tuple[Any, ...]]
    ) -> None:
        self._execute(
            "UPDATE runs SET history_length = ?, history_size_bytes = ? "
            "WHERE namespace = ? AND run_id = ?",
            (length, size, namespace, run_id),
        )
        placeholders = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows))
        self._execute(
            "INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, data) "
            f"VALUES {placeholders}",
            [value for row in rows for value in row],
        )

    def _flush_before(self, sql: str) -> None:
        # Only statements naming these tables can see the buffered rows or lengths.
        if self.history.has_unwritten and ("history" in sql or "runs" in sql):
            self.flush_events()
