"""The small transaction surface the dialect-independent operations are written against.

SQL uses ``?`` placeholders, ``RETURNING``, partial indexes and ``INSERT ... SELECT ...
WHERE NOT EXISTS``: a subset SQLite and PostgreSQL share (a PostgreSQL adapter rewrites
the placeholders). Dialect-specific fragments are attributes of the transaction.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_rpc.store._api import RunOutcome, StoreListener, TaskKind

Row = dict[str, Any]


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
    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    @abc.abstractmethod
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    @abc.abstractmethod
    def run(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Executes a statement; returns the number of rows it changed."""

    @abc.abstractmethod
    def now_ms(self) -> int:
        """The database clock, read inside this transaction."""

    def value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.one(sql, params)
        if row is None:
            return None
        return row[next(iter(row.keys()))]
