"""The PostgreSQL backend: any number of server replicas share one database.

Every operation of :class:`Store` runs as its own READ COMMITTED transaction on a
pooled connection, on a worker thread (the shared operations are synchronous functions of
a :class:`Tx`; threads let several of them wait on the database at once). What makes
that safe with concurrent replicas:

- claims pick candidates with ``FOR UPDATE SKIP LOCKED`` (``claim_lock_suffix``), so two
  claimers never take the same task and neither waits for the other;
- every write after a claim is a conditional UPDATE checking owner, token and expiry in
  the same statement (READ COMMITTED re-evaluates it against the latest committed row);
- ``now`` is the database clock (``clock_timestamp()``), read once per transaction;
- deadlocks, serialization failures and unique violations (two replicas inserting the
  same row at once) roll the operation back and run it again: on the retry it sees the
  other transaction's row and answers as it would have serially (for example
  WORKFLOW_ALREADY_STARTED, or the earlier run for a repeated request id);
- a lost connection before COMMIT was sent rolls back on the server, so the operation is
  retried on a fresh connection; a loss *during* COMMIT is ambiguous and answered
  UNAVAILABLE (the caller retries; completions are idempotent per lease).

Listener notes go out as NOTIFY in the same transaction (see ``_pg_listen``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql
from psycopg.rows import dict_row

from durable_rpc.errors import (
    DurableRpcError,
    InvalidArgumentError,
    StoreUnavailableError,
)
from durable_rpc.store._admin_records import ApiKeyLookup
from durable_rpc.store._fairness import DEFAULT_PRIORITY
from durable_rpc.store._key_cache import KeyCache
from durable_rpc.store._logic import parse_payload, validate_commands
from durable_rpc.store._migrations import PG_MIGRATIONS, check_ordered
from durable_rpc.store._ops import Store
from durable_rpc.store._options import StoreOptions
from durable_rpc.store._pg_hot import CALL as DECISION_CALL
from durable_rpc.store._pg_hot import START_CALL, Decision, DecisionCall, StartCall
from durable_rpc.store._pg_hot_sql import FALLBACK_SQLSTATE
from durable_rpc.store._pg_listen import Listener, encode, notify_statements
from durable_rpc.store._pg_pool import PgPool
from durable_rpc.store._pg_tx import PG_NOW_MS, PgTx, map_error, rollback
from durable_rpc.store._pg_url import hot_path_enabled, parse_url, redact
from durable_rpc.store._records import (
    ActivityCompletion,
    DirectClaim,
    EagerActivities,
    EagerWorkflowTask,
    InlineWorkflowTask,
    LeaseRef,
    StartOptions,
    StartResult,
    WorkflowTaskCompletion,
)
from durable_rpc.store._runs import check_start
from durable_rpc.store._tx import Notes, Tx
from durable_rpc.v1 import workflow_task_pb2

T = TypeVar("T")
A = TypeVar("A")

_log = logging.getLogger("durable_rpc.store.postgres")

#: Retries of an operation that hit a deadlock, a serialization failure or a unique
#: violation caused by a concurrent transaction.
MAX_CONFLICT_RETRIES = 8
#: Retries of an operation whose connection was lost before it committed.
MAX_CONNECTION_RETRIES = 2
#: Key of the advisory lock held while migrating (any constant unique to this schema).
MIGRATION_LOCK_KEY = 0x64757261626C65  # "durable"
#: libpq settings so a silently dead peer is noticed within seconds, not hours.
_CONNECT_KWARGS: dict[str, Any] = {
    "autocommit": True,
    "row_factory": dict_row,
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
}
_CONFLICTS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure, pg_errors.UniqueViolation)
_HANDED_BACK = (*_CONFLICTS, pg_errors.UndefinedFunction)


class PostgresStore(Store):
    """A store on a PostgreSQL database, shareable by any number of server replicas.

    URL: ``postgresql://user:password@host:port/dbname?pool_size=10&acquire_timeout=5``
    plus any libpq parameter (``sslmode``, ``options``, ...).
    """

    BACKEND = "postgresql"

    def __init__(self, url: str, options: StoreOptions | None = None) -> None:
        super().__init__(options)
        self._url = redact(url)
        self._conninfo, self._pool_size, acquire_timeout = parse_url(url)
        self._hot_path = hot_path_enabled(url)
        self._pool = PgPool(
            self._conninfo,
            max_size=self._pool_size,
            acquire_timeout_s=acquire_timeout,
            connect_kwargs=_CONNECT_KWARGS,
            configure=self._configure,
        )
        #: Identifies this store's own NOTIFY payloads (delivered locally, not twice).
        self.origin = uuid.uuid4().hex
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._listen: Listener | None = None
        #: API keys by id: (key, stored hash, database clock minus local clock in ms).
        self._keys = KeyCache()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._channel = "durable_rpc"
        self._stats_lock = threading.Lock()
        self._accepting = False
        self._opened = False
        self._closed = False

    @property
    def url(self) -> str:
        """The URL, password redacted."""
        return self._url

    @property
    def pool(self) -> PgPool:
        return self._pool

    @property
    def listen(self) -> Listener | None:
        return self._listen

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        # A lock held elsewhere longer than busy_timeout answers UNAVAILABLE, as in SQLite.
        conn.execute(f"SET lock_timeout = {int(self._options.busy_timeout_ms)}")

    # -- lifecycle ------------------------------------------------------------------------

    async def open(self) -> None:
        if self._opened:
            raise StoreUnavailableError("store was already opened")
        self._opened = True
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._pool_size, thread_name_prefix="durable-rpc-pg"
        )
        try:
            self._channel = await self._loop.run_in_executor(self._executor, self._migrate)
            self._listen = Listener(
                self._conninfo,
                {
                    k: v
                    for k, v in _CONNECT_KWARGS.items()
                    if k not in ("autocommit", "row_factory")
                },
                self._channel,
                self.origin,
                lambda: self._listener,
                self._keys.forget,
            )
            await self._listen.start(timeout_s=10.0)
        except BaseException:
            self._closed = True
            if self._listen is not None:
                await self._listen.stop()
            self._executor.shutdown(wait=False)
            self._pool.close()
            raise
        self._accepting = True

    async def close(self) -> None:
        """Stops accepting operations, lets the running ones finish, closes connections."""
        if not self._opened or self._closed:
            self._closed = True
            return
        self._closed = True
        self._accepting = False
        if self._listen is not None:
            await self._listen.stop()
        if self._executor is not None:
            await asyncio.to_thread(self._executor.shutdown, True)
        self._pool.close()

    def _migrate(self) -> str:
        """Applies pending migrations under an advisory lock (replicas starting together
        wait for the first one); returns the NOTIFY channel of this schema."""
        check_ordered(PG_MIGRATIONS)
        latest = PG_MIGRATIONS[-1].version
        conn = self._pool.acquire()
        ok = False
        try:
            conn.execute("BEGIN")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
                "name TEXT NOT NULL, applied_at_ms BIGINT NOT NULL)"
            )
            row = conn.execute(
                "SELECT COALESCE(MAX(version), 0) AS v, current_schema() AS s FROM schema_version"
            ).fetchone()
            assert row is not None
            current = int(row["v"])
            if current > latest:
                raise StoreUnavailableError(
                    f"database schema version {current} is newer than this code ({latest})"
                )
            for migration in PG_MIGRATIONS[current:]:
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_version (version, name, applied_at_ms) "
                    f"VALUES (%s, %s, {PG_NOW_MS})",
                    (migration.version, migration.name),
                )
                _log.info("applied migration %d (%s)", migration.version, migration.name)
            conn.execute("COMMIT")
            ok = True
            # Channels are per database; the schema keeps two deployments sharing a
            # database (different search_path) from waking each other.
            return f"durable_rpc.{row['s']}"[:63]
        except psycopg.Error as exc:
            raise StoreUnavailableError(f"cannot migrate {self._url}: {exc}") from exc
        finally:
            if not ok:
                with contextlib.suppress(psycopg.Error):
                    conn.execute("ROLLBACK")
            self._pool.release(conn)

    # -- running operations ---------------------------------------------------------------

    async def check_health(self) -> None:
        # A round trip on a pooled connection: while the database is unreachable the pool
        # fails fast (and reconnects with a capped backoff once it is back).
        await self._read_latest(lambda tx: tx.now_ms())

    async def _write(self, fn: Callable[[Tx], T]) -> T:
        return await self._submit(self._run_write, fn)

    async def _read(self, fn: Callable[[Tx], T]) -> T:
        return await self._submit(self._run_read, fn)

    async def _read_latest(self, fn: Callable[[Tx], T]) -> T:
        return await self._submit(self._run_read_latest, fn)

    async def _submit(self, target: Callable[[A], T], fn: A) -> T:
        executor = self._executor
        if not self._accepting or executor is None:
            raise StoreUnavailableError("the store is not open")
        try:
            future = executor.submit(target, fn)
        except RuntimeError as exc:  # shut down by close()
            raise StoreUnavailableError("the store is closed") from exc
        return await asyncio.wrap_future(future)

    def _run_write(self, fn: Callable[[Tx], T]) -> T:
        result, notes = self._attempts(fn, write=True)
        if notes is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(self._deliver, notes)
        return result

    def _run_read(self, fn: Callable[[Tx], T]) -> T:
        result, _ = self._attempts(fn, write=False)
        return result

    def _run_read_latest(self, fn: Callable[[Tx], T]) -> T:
        result, _ = self._attempts(fn, write=False, snapshot=False)
        return result

    def _attempts(
        self, fn: Callable[[Tx], T], *, write: bool, snapshot: bool = True
    ) -> tuple[T, Notes | None]:
        conflicts = 0
        lost = 0
        began = time.perf_counter()  # retries included: what the caller waited
        while True:
            conn = self._pool.acquire()
            committing = False
            discard = False
            try:
                tx = PgTx(
                    conn, write=write, known_namespaces=self.known_namespaces, snapshot=snapshot
                )
                result = tx.perform(fn)
                committing = True
                if write or snapshot:
                    self._commit(conn, tx.notes if write else None)
            except DurableRpcError:
                discard = not rollback(conn)
                if write:
                    self._count(failed=True, began=began)
                raise
            except psycopg.Error as exc:
                connection_lost = conn.closed or conn.broken
                discard = connection_lost or not rollback(conn)
                if connection_lost:
                    self._pool.discard_idle()
                    if committing:
                        raise StoreUnavailableError(
                            f"the database connection was lost while committing; the outcome "
                            f"is unknown: {exc}"
                        ) from exc
                    lost += 1
                    if lost <= MAX_CONNECTION_RETRIES:
                        continue
                    raise StoreUnavailableError(f"the database connection was lost: {exc}") from exc
                if isinstance(exc, _CONFLICTS) and conflicts < MAX_CONFLICT_RETRIES:
                    conflicts += 1
                    # Jittered, growing pause so the racing transactions separate.
                    time.sleep(random.uniform(0, 0.002 * 2 ** min(conflicts, 5)))
                    continue
                if write:
                    self._count(failed=True, began=began)
                raise map_error(exc) from exc
            finally:
                self._pool.release(conn, discard=discard)
            if write:
                self._count(failed=False, began=began)
                return result, tx.notes if tx.notes else None
            return result, None

    def _commit(self, conn: psycopg.Connection[Any], notes: Notes | None) -> None:
        """COMMIT, preceded by the NOTIFYs of the notes (one round trip)."""
        statements: list[sql.Composable] = []
        if notes:
            statements.extend(notify_statements(self._channel, encode(self.origin, notes)))
        statements.append(sql.SQL("COMMIT"))
        conn.execute(sql.SQL("; ").join(statements))

    def _count(self, *, failed: bool, began: float | None = None) -> None:
        metrics = self._tx_metrics
        if metrics is not None and began is not None:
            metrics.record("rolled_back" if failed else "committed", time.perf_counter() - began)
        with self._stats_lock:
            self._stats.operations += 1
            if failed:
                self._stats.failed_operations += 1
            else:
                self._stats.transactions += 1

    # -- the hot path: a decision recorded by one function call (``_pg_hot``) ------------

    async def complete_activity_task_inline(
        self,
        namespace: str,
        lease: LeaseRef,
        result: bytes,
        eager: EagerWorkflowTask | None = None,
        inline: InlineWorkflowTask | None = None,
    ) -> ActivityCompletion:
        if inline is not None:
            try:  # what the general path refuses, it refuses with its own answer
                payload = parse_payload(result, "result")
            except InvalidArgumentError:
                payload = None
            if payload is not None:
                decision = Decision(
                    namespace,
                    lease,
                    "activity",
                    inline.last_seen_event_id,
                    inline.commands,
                    inline.build_id,
                    inline.eager,
                    run_id=inline.run_id,
                    result=payload,
                )
                done = await self._record_in_one_call(decision)
                if done is not None:
                    return ActivityCompletion(inline=done)
        return await super().complete_activity_task_inline(namespace, lease, result, eager, inline)

    async def complete_workflow_task_tracked(
        self,
        namespace: str,
        lease: LeaseRef,
        last_seen_event_id: int,
        commands: Sequence[workflow_task_pb2.Command],
        build_id: str = "",
        eager: EagerActivities | None = None,
        rejected_updates: Sequence[tuple[str, bytes]] = (),
    ) -> WorkflowTaskCompletion:
        if not rejected_updates:
            decision = Decision(
                namespace, lease, "workflow", last_seen_event_id, commands, build_id, eager
            )
            done = await self._record_in_one_call(decision)
            if done is not None:
                return done
        return await super().complete_workflow_task_tracked(
            namespace, lease, last_seen_event_id, commands, build_id, eager, rejected_updates
        )

    async def _record_in_one_call(self, decision: Decision) -> WorkflowTaskCompletion | None:
        """The decision recorded by the hot-path function, or None: the general path."""
        if not self._hot_path or decision.namespace not in self.known_namespaces:
            return None
        try:
            validate_commands(list(decision.commands))
        except InvalidArgumentError:
            return None
        call = DecisionCall.build(
            decision,
            self._options.history,
            self._options.default_activity_lease_ms,
            self._channel,
            self.origin,
        )
        if call is None:
            return None
        row = await self._submit(self._call_once, (DECISION_CALL, call.args))
        if row is None:
            return None
        with self._stats_lock:
            completion, notes = call.answer(row, self._stats)
        self._settle_call(notes)
        return completion

    async def start_workflow(
        self,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        workflow_version: str,
        task_queue: str,
        input: bytes,
        request_id: str,
        trace_context: Mapping[str, str] | None = None,
        options: StartOptions | None = None,
        claim_for: DirectClaim | None = None,
    ) -> StartResult:
        call = self._start_call(
            namespace,
            workflow_id,
            workflow_type,
            workflow_version,
            task_queue,
            input,
            request_id,
            trace_context,
            options,
            claim_for,
        )
        if call is not None:
            row = await self._submit(self._call_once, (START_CALL, call.args))
            if row is not None:
                task, notes = call.answer(row)
                self._settle_call(notes)
                return StartResult(call.run_id, started=True, workflow_task=task)
        return await super().start_workflow(
            namespace,
            workflow_id,
            workflow_type,
            workflow_version,
            task_queue,
            input,
            request_id,
            trace_context,
            options,
            claim_for,
        )

    def _start_call(
        self,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        workflow_version: str,
        task_queue: str,
        input: bytes,
        request_id: str,
        trace_context: Mapping[str, str] | None,
        options: StartOptions | None,
        claim_for: DirectClaim | None,
    ) -> StartCall | None:
        if not self._hot_path or not request_id or namespace not in self.known_namespaces:
            return None
        try:  # what the general path refuses, it refuses with its own answer
            version, payload, checked = check_start(
                workflow_id, workflow_type, workflow_version, task_queue, input, options
            )
        except InvalidArgumentError:
            return None
        if (
            checked.memo
            or checked.search_rows
            or checked.search_attributes
            or checked.execution_timeout_ms
            or checked.run_timeout_ms
            # A priority or key is written to the run by the general path (_fairness).
            or checked.priority != DEFAULT_PRIORITY
            or checked.fairness_key is not None
            # The function writes history without the payload refs (``_payloads``).
            or payload.HasField("external")
            or checked.concurrency_key
        ):
            return None
        claim = None
        if claim_for is not None:
            if not claim_for.worker_id or claim_for.lease_ms <= 0:
                return None
            claim = (claim_for.worker_id, claim_for.lease_ms)
        return StartCall.build(
            namespace,
            workflow_id,
            workflow_type,
            version,
            task_queue,
            payload,
            request_id,
            dict(trace_context or {}),
            str(uuid.uuid4()),
            claim,
            self._options.history,
            self._channel,
            self.origin,
        )

    def _call_once(self, call: tuple[str, tuple[Any, ...]]) -> dict[str, Any] | None:
        """One autocommitted call of a hot-path function: its row, or None to run the
        general path. That is the function's own answer for every case it does not cover,
        and also the way out of a conflict or a lost connection: the call either
        committed whole (the general path then finds what it did -- this lease's outcome
        recorded, this request id's run -- and answers as for a repeat) or not at all
        (the general path does the work, with its retries)."""
        statement, args = call
        began = time.perf_counter()
        conn = self._pool.acquire()
        discard = False
        try:
            row: dict[str, Any] | None = conn.execute(statement, args).fetchone()
        except psycopg.Error as exc:
            # No such function: a newer version's migration gave it another signature;
            # this replica works on the general path until it is upgraded.
            if exc.sqlstate == FALLBACK_SQLSTATE or isinstance(exc, _HANDED_BACK):
                return None
            if conn.closed or conn.broken:
                discard = True
                self._pool.discard_idle()
                return None
            self._count(failed=True, began=began)
            raise map_error(exc) from exc
        finally:
            self._pool.release(conn, discard=discard)
        assert row is not None
        if self._tx_metrics is not None:  # counted in stats by _settle_call, on the loop
            self._tx_metrics.record("committed", time.perf_counter() - began)
        return row

    def _settle_call(self, notes: Notes) -> None:
        """Counts a hot-path call that committed and delivers its notes (on the loop)."""
        self._count(failed=False)
        with self._stats_lock:
            self._stats.hot_calls += 1
        if notes:
            self._deliver(notes)

    # -- API keys: cached while LISTEN is live ---------------------------------------------

    async def lookup_api_key(self, key_id: str) -> ApiKeyLookup | None:
        """A key as last read, while this replica's LISTEN connection is in place: every
        creation or revocation NOTIFYs in its own transaction and each replica forgets
        its cache when the notification arrives (as it commits), and a lost connection
        drops the cache and reads every key until LISTEN is back. So the check on every
        call costs no round trip. Expiry is still judged by the database clock: the
        offset to it is measured when the key is read."""
        listen = self._listen

        def read() -> Awaitable[ApiKeyLookup | None]:
            return super(PostgresStore, self).lookup_api_key(key_id)

        if listen is not None and listen.live:
            return await self._keys.lookup(key_id, read)
        return await self._keys.read(key_id, read)

    def _deliver(self, notes: Notes) -> None:
        if notes.keys:
            self._keys.forget()
        listener = self._listener
        if listener is None:
            return
        try:
            notes.deliver(listener)
        except Exception:
            _log.exception("store listener failed")
