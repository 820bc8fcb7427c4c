"""The SQLite backend: WAL, synchronous=FULL, one writer connection on a dedicated
thread doing group commit, and a separate read connection on its own thread.

Group commit: callers' write operations are queued; the writer thread drains the queue
and runs up to ``max_batch`` operations in one ``BEGIN IMMEDIATE`` transaction, each in
its own SAVEPOINT (an operation that raises is rolled back alone and its caller gets the
exception), commits once, and only then answers every caller and delivers listener
notifications. If the transaction itself cannot be completed (I/O error, database file
removed or replaced, lock timeout) every caller of the batch gets StoreUnavailableError.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from durable_rpc.errors import DurableRpcError, InternalError, StoreUnavailableError
from durable_rpc.store._admin_records import ApiKeyLookup
from durable_rpc.store._clock import SkipReport, idleness
from durable_rpc.store._dialects import SQLITE
from durable_rpc.store._key_cache import KeyCache
from durable_rpc.store._migrations import SQLITE_MIGRATIONS, check_ordered
from durable_rpc.store._ops import Store
from durable_rpc.store._options import StoreOptions
from durable_rpc.store._tx import Notes, Row, Tx
from durable_rpc.store._tx_metrics import TxOutcome

T = TypeVar("T")

_log = logging.getLogger("durable_rpc.store.sqlite")

MEMORY = ":memory:"


class _SQLiteTx(Tx):
    def __init__(
        self,
        conn: sqlite3.Connection,
        hook: Callable[[str], None] | None = None,
        known_namespaces: set[str] | None = None,
        now_ms: int | None = None,
        clock_offset_ms: int = 0,
    ) -> None:
        super().__init__(known_namespaces)
        self._conn = conn
        self._hook = hook
        self._now_ms = now_ms
        self._clock_offset_ms = clock_offset_ms

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Row]:
        if self._hook is not None:
            self._hook(sql)
        cursor = self._conn.execute(sql, tuple(params))
        try:
            rows: list[Row] = cursor.fetchall()
        finally:
            cursor.close()
        return rows

    def _execute(self, sql: str, params: Sequence[Any]) -> int:
        if self._hook is not None:
            self._hook(sql)
        cursor = self._conn.execute(sql, tuple(params))
        try:
            return cursor.rowcount
        finally:
            cursor.close()

    def now_ms(self) -> int:
        """The database clock, read once per transaction: every operation of a group-commit
        batch sees the same instant (batches are serialized by the single writer, so this
        time never goes backwards and all decisions inside a batch agree)."""
        if self._now_ms is None:
            # The offset (0 except under durable_rpc.testing's time skipping) is added in
            # SQL: the database clock stays the only source of time.
            row = self.one(f"SELECT {SQLITE.now_ms} + ? AS now_ms", (self._clock_offset_ms,))
            assert row is not None
            self._now_ms = int(row["now_ms"])
        return self._now_ms


@dataclass(slots=True)
class _Op:
    fn: Callable[[Tx], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


_STOP = object()


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller gave up (cancelled); the operation still happened
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _unavailable(exc: BaseException, what: str) -> StoreUnavailableError:
    if isinstance(exc, StoreUnavailableError):
        return exc
    return StoreUnavailableError(f"{what}: {exc}")


def _map_error(exc: Exception) -> Exception:
    if isinstance(exc, DurableRpcError):
        return exc
    if isinstance(exc, sqlite3.IntegrityError):
        return InternalError(f"store invariant violated: {exc}")
    if isinstance(exc, sqlite3.Error):
        return StoreUnavailableError(f"database error: {exc}")
    return exc


class SQLiteStore(Store):
    """A file (``path``) or in-memory (``":memory:"``) SQLite store.

    ``statement_hook`` (diagnostics, tests) is called with the text of every statement an
    operation executes, on the thread executing it.

    ``clock_offset_ms`` is for ``durable_rpc.testing`` only: milliseconds added to the
    database clock so tests can skip time (see :meth:`skip_time`). It only ever grows.
    """

    BACKEND = "sqlite"

    def __init__(
        self,
        path: str,
        options: StoreOptions | None = None,
        *,
        statement_hook: Callable[[str], None] | None = None,
        clock_offset_ms: int = 0,
    ) -> None:
        super().__init__(options)
        self._hook = statement_hook
        self._clock_offset_ms = clock_offset_ms
        self._memory = path == MEMORY
        self._path = path if self._memory else os.path.abspath(path)
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._accepting = False
        self._opened = False
        self._closed = False
        self._writer: threading.Thread | None = None
        self._writer_done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._reader: concurrent.futures.ThreadPoolExecutor | None = None
        self._reader_conn: sqlite3.Connection | None = None
        # API keys by id as last read (see lookup_api_key), and the writer connection's
        # data_version when it last looked: it moves only when another process commits.
        self._keys = KeyCache()
        self._outside_version: int | None = None
        self._identity: tuple[int, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def path(self) -> str:
        return self._path

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            raise StoreUnavailableError("store was already opened")
        self._opened = True
        self._loop = asyncio.get_running_loop()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._writer = threading.Thread(
            target=self._writer_main, args=(ready,), name="durable-rpc-sqlite-writer", daemon=True
        )
        self._writer.start()
        try:
            await asyncio.wrap_future(ready)
        except BaseException:
            self._closed = True
            raise
        if not self._memory:
            self._reader = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="durable-rpc-sqlite-reader"
            )
            try:
                await asyncio.wrap_future(self._reader.submit(self._reader_open))
            except BaseException:
                with self._lock:
                    self._queue.put(_STOP)
                await asyncio.wrap_future(self._writer_done)
                self._reader.shutdown(wait=False)
                self._closed = True
                raise
        with self._lock:
            self._accepting = True

    async def close(self) -> None:
        """Stops accepting operations, lets the writer finish every queued one (they commit
        and their callers are answered), then closes both connections."""
        if not self._opened or self._closed:
            self._closed = True
            return
        self._closed = True
        with self._lock:
            self._accepting = False
            self._queue.put(_STOP)
        await asyncio.wrap_future(self._writer_done)
        reader = self._reader
        if reader is not None:
            with contextlib.suppress(RuntimeError):
                await asyncio.wrap_future(reader.submit(self._reader_close))
            await asyncio.to_thread(reader.shutdown, True)

    # -- connections ----------------------------------------------------------------------

    def _connect(self, *, reader: bool) -> sqlite3.Connection:
        busy_ms = self._options.busy_timeout_ms
        if self._memory:
            conn = sqlite3.connect(MEMORY, isolation_level=None)
        else:
            mode = "rw" if reader else "rwc"
            uri = f"file:{urllib.parse.quote(self._path)}?mode={mode}"
            conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=busy_ms / 1000)
        try:
            # sqlite3.Row is built in C and supports row["column"], all the operations
            # use; a Python row factory costs a function call and a dict per row.
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}")
            if not self._memory and not reader:
                row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                if str(row["journal_mode"]).lower() != "wal":
                    raise StoreUnavailableError(f"cannot enable WAL on {self._path}")
            conn.execute("PRAGMA synchronous = FULL")
            if reader:
                conn.execute("PRAGMA query_only = ON")
            return conn
        except BaseException:
            conn.close()
            raise

    # The errors below reach clients: they name no path (the server logs it).
    def _file_identity(self) -> tuple[int, int]:
        try:
            st = os.stat(self._path)
        except OSError as exc:
            raise StoreUnavailableError(f"the database file is gone ({exc.strerror})") from exc
        return (st.st_dev, st.st_ino)

    def _check_file(self) -> None:
        """The file we hold open must still be the file at the path: writes acknowledged to
        a deleted or replaced file would be lost."""
        if self._memory:
            return
        if self._file_identity() != self._identity:
            raise StoreUnavailableError("the database file was replaced")

    async def check_health(self) -> None:
        if self._memory:
            if not self._accepting:
                raise StoreUnavailableError("the store is not open")
            return
        await self._read(self._probe)
        # An empty write: the writer looks for other processes' commits (cached keys)
        # even when no call writes anything.
        await self._write(lambda tx: None)

    def _probe(self, tx: Tx) -> None:
        """On the reader (after its _check_file): the file is writable by this process.
        The open connections keep writing to a file made read-only, but a restart could
        not, and an immutable file (chattr +i, or a read-only mount) fails the next
        checkpoint; os.access sees both, for root too."""
        if not os.access(self._path, os.W_OK):
            raise StoreUnavailableError("the database file is not writable")
        tx.now_ms()

    def _migrate(self, conn: sqlite3.Connection) -> None:
        """Applies the pending migrations, in order, in one transaction."""
        check_ordered(SQLITE_MIGRATIONS)
        latest = SQLITE_MIGRATIONS[-1].version
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at_ms INTEGER NOT NULL)"
            )
            row = conn.execute("SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")
            current = int(row.fetchone()["v"])
            if current > latest:
                raise StoreUnavailableError(
                    f"database schema version {current} is newer than this code ({latest})"
                )
            for migration in SQLITE_MIGRATIONS[current:]:
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    f"INSERT INTO schema_version (version, name, applied_at_ms) "
                    f"VALUES (?, ?, {SQLITE.now_ms})",
                    (migration.version, migration.name),
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    # -- the writer thread ----------------------------------------------------------------

    def _writer_main(self, ready: concurrent.futures.Future[None]) -> None:
        conn: sqlite3.Connection | None = None
        try:
            try:
                conn = self._connect(reader=False)
                self._migrate(conn)
                if not self._memory:
                    self._identity = self._file_identity()
            except BaseException as exc:
                ready.set_exception(_unavailable(exc, f"cannot open {self._path}"))
                return
            ready.set_result(None)
            stop = False
            while not stop:
                first = self._queue.get()
                if first is _STOP:
                    break
                assert isinstance(first, _Op)
                batch = [first]
                while len(batch) < self._options.max_batch:
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    assert isinstance(item, _Op)
                    batch.append(item)
                self._run_batch(conn, batch)
        except BaseException:  # pragma: no cover - a bug; never leave callers hanging
            _log.exception("sqlite writer thread crashed")
        finally:
            with self._lock:
                self._accepting = False
            if conn is not None:
                try:
                    conn.close()
                except sqlite3.Error:
                    _log.exception("closing the sqlite writer connection failed")
            self._fail_queued()
            self._writer_done.set_result(None)

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _Op):
                self._settle(item, None, StoreUnavailableError("the store is closed"))

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Op]) -> None:
        outcomes: list[tuple[_Op, Any, BaseException | None]] = []
        notes: list[Notes] = []
        failed = 0
        metrics = self._tx_metrics
        began = time.perf_counter() if metrics is not None else 0.0
        try:
            conn.execute("BEGIN IMMEDIATE")
            self._note_outside_commits(conn)
            now = _SQLiteTx(conn, self._hook, clock_offset_ms=self._clock_offset_ms).now_ms()
            # A batch of one needs no savepoint: its failure rolls back the whole (its own)
            # transaction. Two statements less per operation when callers come one by one.
            alone = len(batch) == 1
            for op in batch:
                tx = _SQLiteTx(conn, self._hook, self.known_namespaces, now)
                if not alone:
                    conn.execute("SAVEPOINT op")
                try:
                    result = tx.perform(op.fn)
                except Exception as exc:
                    if isinstance(exc, sqlite3.Error) and not conn.in_transaction:
                        raise  # SQLite rolled the whole transaction back
                    if alone:
                        conn.execute("ROLLBACK")
                    else:
                        conn.execute("ROLLBACK TO op")
                        conn.execute("RELEASE op")
                    outcomes.append((op, None, _map_error(exc)))
                    failed += 1
                else:
                    if not alone:
                        conn.execute("RELEASE op")
                    outcomes.append((op, result, None))
                    notes.append(tx.notes)
            committed = conn.in_transaction
            if committed:
                self._check_file()
                conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    _log.exception("rollback failed")
            self._stats.aborted_batches += 1
            if metrics is not None:
                metrics.record("aborted", time.perf_counter() - began)
            unavailable = _unavailable(exc, "the database is unusable")
            _log.warning("write batch of %d aborted: %s", len(batch), exc)
            for op in batch:
                self._settle(op, None, unavailable)
            return
        if metrics is not None:
            # A batch whose every operation failed rolled back operation by operation
            # and committed nothing: still one transaction, counted with its outcome.
            outcome: TxOutcome = "committed" if committed else "rolled_back"
            metrics.record(outcome, time.perf_counter() - began)
        self._stats.transactions += committed
        self._stats.operations += len(batch)
        self._stats.failed_operations += failed
        loop = self._loop
        if loop is not None and all(op.loop is loop for op in batch):
            # One wake-up of the event loop for the whole batch, not one per caller: each
            # call_soon_threadsafe writes to the loop's self-pipe and contends for the GIL.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._answer_batch, outcomes, notes)
            return
        for op, result, error in outcomes:
            self._settle(op, result, error)
        if notes and loop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._deliver, notes)

    def _answer_batch(
        self, outcomes: list[tuple[_Op, Any, BaseException | None]], notes: list[Notes]
    ) -> None:
        """On the event loop: answer every caller of a committed batch, then notify."""
        for op, result, error in outcomes:
            _resolve(op.future, result, error)
        self._deliver(notes)

    @staticmethod
    def _settle(op: _Op, result: Any, error: BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):  # RuntimeError: the caller's loop is closed
            op.loop.call_soon_threadsafe(_resolve, op.future, result, error)

    def _deliver(self, batch: list[Notes]) -> None:
        if any(notes.keys for notes in batch):
            self._keys.forget()
        listener = self._listener
        if listener is None:
            return
        for notes in batch:
            try:
                notes.deliver(listener)
            except Exception:
                _log.exception("store listener failed")

    # -- the reader thread ----------------------------------------------------------------

    def _reader_open(self) -> None:
        try:
            self._reader_conn = self._connect(reader=True)
        except BaseException as exc:
            raise _unavailable(exc, f"cannot open {self._path} for reading") from exc

    def _reader_close(self) -> None:
        conn, self._reader_conn = self._reader_conn, None
        if conn is not None:
            conn.close()

    def _run_read(self, fn: Callable[[Tx], T]) -> T:
        return self._run_read_on(self._reader_conn, fn)

    def _run_read_on(self, conn: sqlite3.Connection | None, fn: Callable[[Tx], T]) -> T:
        if conn is None:
            raise StoreUnavailableError("the store is closed")
        try:
            self._check_file()
            conn.execute("BEGIN")
            try:
                return fn(
                    _SQLiteTx(
                        conn,
                        self._hook,
                        self.known_namespaces,
                        clock_offset_ms=self._clock_offset_ms,
                    )
                )
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except DurableRpcError:
            raise
        except sqlite3.IntegrityError as exc:
            raise InternalError(f"store invariant violated: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"database error: {exc}") from exc

    async def lookup_api_key(self, key_id: str) -> ApiKeyLookup | None:
        """A key as last read. With authentication on every call looks its key up, and
        a read per call costs the event loop more than the whole rest of a call's
        authorization (measured: -11% throughput), so keys are cached and forgotten
        whenever they may have changed: at once after this store's own key changes
        commit (before the changing call is answered), and when another process (an
        offline ``token revoke --db``) has committed anything, which the writer sees by
        ``PRAGMA data_version`` at its next transaction, at most a health-probe interval
        away (see check_health). Expiry is judged by the database clock, which on SQLite
        is this machine's clock (plus the test clock's offset)."""
        if self._memory:
            return await super().lookup_api_key(key_id)
        # SQLite's clock is this machine's, plus the test clock's offset as it is now.
        return await self._keys.lookup(
            key_id,
            lambda: super(SQLiteStore, self).lookup_api_key(key_id),
            int(time.time() * 1000) + self._clock_offset_ms,
        )

    def _note_outside_commits(self, conn: sqlite3.Connection) -> None:
        """On the writer: has another process committed since we last looked?"""
        version = int(conn.execute("PRAGMA data_version").fetchone()[0])
        if self._outside_version is not None and version != self._outside_version:
            loop = self._loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._keys.forget)
        self._outside_version = version

    # -- time skipping (durable_rpc.testing only) -----------------------------------------

    async def skip_time(self, until_ms: int | None = None) -> SkipReport:
        """Moves the clock forward to the earliest due time (capped at ``until_ms``) if
        nothing is queued or leased, i.e. everything left waits on time alone.

        Runs as one write operation on the writer thread, so the idleness check and the
        jump are atomic with respect to every other operation: a task claimed or created
        concurrently is either seen (no skip) or ordered after the jump. Leases are never
        expired by a jump because a leased task prevents it.
        """

        def op(tx: Tx) -> SkipReport:
            # Not tx.now_ms(): that is the group-commit batch's instant, read before any
            # jump an earlier operation of this batch made (the automatic skipper and a
            # test's sleep race), and adding the gap from it again would jump twice.
            row = tx.one(f"SELECT {SQLITE.now_ms} + ? AS now_ms", (self._clock_offset_ms,))
            assert row is not None
            now = int(row["now_ms"])
            state = idleness(tx, now)
            if not state.idle:
                return SkipReport(
                    skipped_ms=0, db_now_ms=now, idle=False, schedule_due=state.schedule_due
                )
            due = state.next_due_ms
            if until_ms is not None:
                due = until_ms if due is None else min(due, until_ms)
            if due is not None and state.next_schedule_ms is not None:
                due = min(due, state.next_schedule_ms)  # each slot fires at its moment
            if due is None or due <= now:
                return SkipReport(skipped_ms=0, db_now_ms=now, idle=True)
            self._clock_offset_ms += due - now
            return SkipReport(skipped_ms=due - now, db_now_ms=due, idle=True)

        return await self._write(op)

    # -- Store ----------------------------------------------------------------------------

    async def _write(self, fn: Callable[[Tx], T]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            if not self._accepting:
                raise StoreUnavailableError("the store is not open")
            self._queue.put(_Op(fn, future, loop))
        return await future

    async def _read(self, fn: Callable[[Tx], T]) -> T:
        if self._memory:
            # One in-memory database is visible to one connection only.
            return await self._write(fn)
        reader = self._reader
        if reader is None or not self._accepting:
            raise StoreUnavailableError("the store is not open")
        try:
            future = reader.submit(self._run_read, fn)
        except RuntimeError as exc:
            raise StoreUnavailableError("the store is closed") from exc
        return await asyncio.wrap_future(future)
