"""A PostgreSQL transaction for the shared operations (:class:`Tx` on a psycopg
connection), and what an operation's retry loop needs from psycopg: rolling back and
mapping an error to the product's."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors

from durable_rpc.errors import (
    DurableRpcError,
    InternalError,
    StoreUnavailableError,
    WorkflowAlreadyStartedError,
)
from durable_rpc.store._dialects import POSTGRES
from durable_rpc.store._tx import Row, Tx

#: The database clock in integer milliseconds since the epoch.
PG_NOW_MS = POSTGRES.now_ms

_BEGIN_WRITE = f"BEGIN; SELECT {PG_NOW_MS} AS now_ms"
_BEGIN_READ = f"BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SELECT {PG_NOW_MS} AS now_ms"


@functools.lru_cache(maxsize=4096)
def _to_pg(statement: str) -> str:
    """``?`` placeholders to psycopg's ``%s`` (the shared SQL has no other ``?`` or ``%``)."""
    return statement.replace("%", "%%").replace("?", "%s")


class PgTx(Tx):
    claim_lock_suffix = " FOR UPDATE SKIP LOCKED"

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        *,
        write: bool,
        known_namespaces: set[str] | None = None,
        snapshot: bool = True,
    ) -> None:
        super().__init__(known_namespaces)
        if write:
            # A run read by a write is locked until commit: a concurrent close (or any
            # change) is waited for, then seen, exactly as if the two ran one after another.
            self.row_lock_suffix = " FOR UPDATE"
        # One cursor for the whole transaction (a cursor per statement costs ~20 us).
        self._cursor = conn.cursor()
        self._now: int | None = None
        if write or snapshot:
            # BEGIN and the clock in one round trip (a multi-statement simple query).
            self._cursor.execute(_BEGIN_WRITE if write else _BEGIN_READ)
            self._cursor.nextset()
            row = self._cursor.fetchone()
            assert row is not None
            self._now = row["now_ms"]

    def _fetch(self, sql_: str, params: Sequence[Any]) -> list[Row]:
        cursor = self._cursor.execute(_to_pg(sql_), tuple(params))
        # No result set (an UPDATE without RETURNING): no columns. Cheaper than asking for
        # ``cursor.description``, which builds a Column object per column (~6% of the
        # store's CPU, py-spy).
        result = cursor.pgresult
        if result is None or not result.nfields:
            return []
        rows: list[Row] = cursor.fetchall()
        return rows

    def _execute(self, sql_: str, params: Sequence[Any]) -> int:
        return self._cursor.execute(_to_pg(sql_), tuple(params)).rowcount

    def _write_events(
        self, namespace: str, run_id: str, length: int, size: int, rows: list[tuple[Any, ...]]
    ) -> None:
        # One round trip: the length update rides along as a data-modifying CTE.
        placeholders = ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows))
        self._execute(
            "WITH grown AS (UPDATE runs SET history_length = ?, history_size_bytes = ? "
            "WHERE namespace = ? AND run_id = ?) "
            "INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, data) "
            f"VALUES {placeholders}",
            [length, size, namespace, run_id, *(value for row in rows for value in row)],
        )

    def now_sql(self) -> str:
        # A subquery: evaluated once per statement, so an index can range on it (the bare
        # clock_timestamp() is volatile: a condition on it is checked row by row).
        return f"(SELECT {PG_NOW_MS})" if self._now is None else str(self._now)

    def now_ms(self) -> int:
        if self._now is None:  # no transaction (``_read_latest``): read the clock now
            row = self._cursor.execute(f"SELECT {PG_NOW_MS} AS now_ms").fetchone()
            assert row is not None
            self._now = int(row["now_ms"])
        return self._now


def rollback(conn: psycopg.Connection[Any]) -> bool:
    """Rolls back the open transaction; False if the connection is unusable."""
    if conn.closed or conn.broken:
        return False
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        return False
    return True


def map_error(exc: psycopg.Error) -> DurableRpcError:
    if isinstance(exc, pg_errors.UniqueViolation):
        if exc.diag.constraint_name == "runs_open_workflow_id":
            return WorkflowAlreadyStartedError("the workflow id already has an open run")
        return InternalError(f"store invariant violated: {exc}")
    if isinstance(exc, pg_errors.IntegrityError | pg_errors.ProgrammingError | pg_errors.DataError):
        return InternalError(f"store error: {exc}")
    return StoreUnavailableError(f"database error: {exc}")
