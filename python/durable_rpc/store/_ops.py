"""Every store operation, written once against :class:`Tx` (dialect-independent SQL).

A backend subclasses :class:`SqlStore` and supplies ``_write`` (runs a function inside a
write transaction, answers after the commit, then delivers the function's notes to the
listener) and ``_read`` (runs a function on a consistent read snapshot). Every ``now``
comes from ``tx.now_ms()``: the database clock, read inside the transaction that uses it.
"""

from __future__ import annotations

import abc
import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from durable_rpc.errors import (
    DefinitionChangedError,
    InvalidArgumentError,
    LeaseLostError,
    NotFoundError,
    WorkflowAlreadyStartedError,
    WorkflowNotRunningError,
)
from durable_rpc.store._api import (
    RUN_STATUSES,
    ActivityCompletion,
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    DirectClaim,
    DueReport,
    EagerActivities,
    EagerWorkflowTask,
    HeartbeatResult,
    HistoryPage,
    InlineWorkflowTask,
    LeaseRef,
    PendingActivity,
    RunDescription,
    RunInfo,
    RunOutcome,
    SignalWithStartResult,
    StartOptions,
    StartResult,
    Store,
    StoreListener,
    StoreOptions,
    StoreStats,
    TaskKind,
    WorkflowTaskCompletion,
)
from durable_rpc.store._children import request_child_cancel, start_child
from durable_rpc.store._logic import (
    ACTIVITY_TIMEOUT_ERROR,
    AMBIGUOUS_EFFECT_ERROR,
    CommandPlan,
    activity_retry_delay_ms,
    activity_timeouts,
    duration_ms,
    earliest,
    failure_bytes,
    lease_lost_message,
    parse_failure,
    parse_options,
    parse_payload,
    validate_commands,
    workflow_task_backoff_ms,
)
from durable_rpc.store._runs import (
    check_start_options,
    continue_as_new,
    create_run,
    deliver_signal,
    earlier_start,
    open_run_of,
    signal_seen,
)
from durable_rpc.store._search import (
    compile_query,
    parse_search_attributes,
    read_search_attributes,
    write_search_attributes,
)
from durable_rpc.store._shared import (
    ACTIVE,
    INPUT_KINDS_SQL,
    LIST_LIMIT_MAX,
    append_event,
    blob,
    close_run,
    ensure_workflow_task,
    fenced_update,
    find_run,
    has_active_workflow_task,
    lease_miss,
    open_run,
    request_cancel_run,
    require,
    require_namespace,
    run_info,
    saw_new_input,
    version_or_default,
)
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _WorkflowClaim:
    task_id: int
    fencing_token: int
    expires_at_ms: int
    now_ms: int
    attempt: int
    run: Row
    #: The history, when it was short enough to read inside the claiming transaction.
    events: list[bytes] | None = None


# Lease expiries are looked at on this grid (ms): every claim adds one, and almost every
# lease ends long before it expires, so rounding them up lets one due pass serve many
# (an expired lease is noticed at most this much late; timers keep their exact times).
LEASE_CHECK_GRANULARITY_MS = 250


def lease_check_at(expires_ms: int) -> int:
    """When the server should look for the lease expiring at ``expires_ms``."""
    return -(-expires_ms // LEASE_CHECK_GRANULARITY_MS) * LEASE_CHECK_GRANULARITY_MS


@dataclass(frozen=True, slots=True)
class _Decision:
    """A workflow task's decision as the store records it."""

    worker_id: str
    build_id: str
    last_seen_event_id: int
    #: The workflow clock of the decided activation (the WorkflowTaskCompleted marker's).
    workflow_time_ms: int
    commands: list[workflow_task_pb2.Command]
    plan: CommandPlan
    eager: EagerActivities | None


def _eager_seqs(
    commands: Sequence[workflow_task_pb2.Command], eager: EagerActivities | None
) -> list[int]:
    """The seqs of the scheduled activities eligible for eager dispatch, up to the limit."""
    if eager is None or eager.limit <= 0:
        return []
    return [
        c.seq
        for c in commands
        if c.WhichOneof("kind") == "schedule_activity"
        and c.schedule_activity.task_queue in ("", eager.task_queue)
        and c.schedule_activity.activity_type in eager.activity_types
    ][: eager.limit]


# Histories up to this many events are read inside the claiming transaction: cheaper than
# a second round trip to the reader; longer ones are read after the commit, off the writer.
INLINE_HISTORY_EVENTS = 256


def _read_history(tx: Tx, namespace: str, run_id: str, length: int) -> list[bytes]:
    rows = tx.all(
        "SELECT data FROM history WHERE namespace = ? AND run_id = ? AND event_id <= ? "
        "ORDER BY event_id",
        (namespace, run_id, length),
    )
    return [bytes(row["data"]) for row in rows]


class SqlStore(Store):
    """The dialect-independent half of a SQL backend."""

    def __init__(self, options: StoreOptions | None = None) -> None:
        self._options = options or StoreOptions()
        self._listener: StoreListener | None = None
        self._stats = StoreStats()
        # Shared by every transaction of this store (see Tx.known_namespaces).
        self.known_namespaces: set[str] = set()

    @property
    def options(self) -> StoreOptions:
        return self._options

    @property
    def stats(self) -> StoreStats:
        return self._stats

    def set_listener(self, listener: StoreListener | None) -> None:
        self._listener = listener

    @abc.abstractmethod
    async def _write(self, fn: Callable[[Tx], T]) -> T:
        """Runs ``fn`` in a write transaction (rolled back alone if it raises); returns
        after the commit."""

    @abc.abstractmethod
    async def _read(self, fn: Callable[[Tx], T]) -> T:
        """Runs ``fn`` on a consistent read snapshot."""

    # -- clock and namespaces -------------------------------------------------------------

    async def now_ms(self) -> int:
        return await self._read(lambda tx: tx.now_ms())

    async def namespace_exists(self, namespace: str) -> bool:
        def op(tx: Tx) -> bool:
            return tx.one("SELECT name FROM namespaces WHERE name = ?", (namespace,)) is not None

        return await self._read(op)

    async def create_namespace(self, namespace: str) -> None:
        require(namespace, "namespace")

        def op(tx: Tx) -> None:
            tx.run(
                "INSERT INTO namespaces (name, created_at_ms) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (namespace, tx.now_ms()),
            )

        await self._write(op)

    # -- runs -----------------------------------------------------------------------------

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
        require(workflow_id, "workflow_id")
        require(workflow_type, "workflow_type")
        require(task_queue, "task_queue")
        version = version_or_default(workflow_version)
        payload = parse_payload(input, "input")
        checked = check_start_options(options)

        if claim_for is not None:
            require(claim_for.worker_id, "worker_id")
            if claim_for.lease_ms <= 0:
                raise InvalidArgumentError("lease_ms must be positive")

        def op(tx: Tx) -> StartResult | tuple[str, _WorkflowClaim]:
            require_namespace(tx, namespace)
            earlier = earlier_start(tx, namespace, workflow_id, request_id)
            if earlier is not None:
                return StartResult(earlier, started=False)
            running = open_run_of(tx, namespace, workflow_id)
            if running is not None:
                # PostgreSQL: the row lock may have waited for a racing start of this very
                # request; a fresh statement sees what it committed.
                earlier = earlier_start(tx, namespace, workflow_id, request_id)
                if earlier is not None:
                    return StartResult(earlier, started=False)
                raise WorkflowAlreadyStartedError(
                    f"workflow {workflow_id!r} already has an open run {running['run_id']}"
                )
            run_id, _ = create_run(
                tx,
                namespace,
                workflow_id,
                workflow_type,
                version,
                task_queue,
                payload,
                request_id,
                trace_context,
                checked,
            )
            if claim_for is None:
                return StartResult(run_id, started=True)
            claim = self._lease_workflow_task(
                tx,
                namespace,
                claim_for.worker_id,
                claim_for.lease_ms,
                tx.now_ms(),
                "SELECT task_id FROM tasks WHERE namespace = ? AND run_id = ? "
                f"AND kind = 'workflow' AND state = 'queued'{tx.claim_lock_suffix}",
                (namespace, run_id),
            )
            if claim is None:  # pragma: no cover - a new run always has its first task
                return StartResult(run_id, started=True)
            # The poller it is claimed for needs no wake-up; others would find nothing.
            tx.notes.tasks.discard((namespace, task_queue, "workflow"))
            return run_id, claim

        done = await self._write(op)
        if isinstance(done, StartResult):
            return done
        run_id, claim = done
        assert claim_for is not None
        task = await self._with_history(namespace, claim_for.worker_id, claim)
        return StartResult(run_id, started=True, workflow_task=task)

    async def signal_workflow(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        signal_name: str,
        input: bytes,
        request_id: str,
    ) -> bool:
        require(signal_name, "signal_name")
        payload = parse_payload(input, "input")

        def op(tx: Tx) -> bool:
            run = find_run(tx, namespace, workflow_id, run_id)
            if signal_seen(tx, namespace, run["run_id"], request_id):
                return False
            if run["status"] != "running":
                raise WorkflowNotRunningError(f"run {run['run_id']} is {run['status']}")
            deliver_signal(
                tx, namespace, run["run_id"], run["task_queue"], signal_name, payload, request_id
            )
            return True

        return await self._write(op)

    async def signal_with_start(
        self,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        workflow_version: str,
        task_queue: str,
        input: bytes,
        signal_name: str,
        signal_input: bytes,
        request_id: str,
        trace_context: Mapping[str, str] | None = None,
        options: StartOptions | None = None,
    ) -> SignalWithStartResult:
        require(workflow_id, "workflow_id")
        require(workflow_type, "workflow_type")
        require(task_queue, "task_queue")
        require(signal_name, "signal_name")
        version = version_or_default(workflow_version)
        start_payload = parse_payload(input, "input")
        signal_payload = parse_payload(signal_input, "signal input")
        checked = check_start_options(options)

        def op(tx: Tx) -> SignalWithStartResult:
            require_namespace(tx, namespace)
            run = open_run_of(tx, namespace, workflow_id)
            if run is not None:
                run_id = str(run["run_id"])
                if signal_seen(tx, namespace, run_id, request_id):
                    return SignalWithStartResult(run_id, started=False, delivered=False)
                deliver_signal(
                    tx,
                    namespace,
                    run_id,
                    run["task_queue"],
                    signal_name,
                    signal_payload,
                    request_id,
                )
                return SignalWithStartResult(run_id, started=False, delivered=True)
            earlier = earlier_start(tx, namespace, workflow_id, request_id)
            if earlier is not None:
                # This request started a run that has closed since: a retried call.
                return SignalWithStartResult(earlier, started=False, delivered=False)
            run_id, _ = create_run(
                tx,
                namespace,
                workflow_id,
                workflow_type,
                version,
                task_queue,
                start_payload,
                request_id,
                trace_context,
                checked,
            )
            # Recorded right after WorkflowStarted and before any workflow task ran, so
            # the first activation carries both: handlers see it before the main method.
            deliver_signal(
                tx, namespace, run_id, task_queue, signal_name, signal_payload, request_id
            )
            return SignalWithStartResult(run_id, started=True, delivered=True)

        return await self._write(op)

    async def request_cancel(
        self, namespace: str, workflow_id: str, run_id: str | None, reason: str
    ) -> None:
        def op(tx: Tx) -> None:
            run = find_run(tx, namespace, workflow_id, run_id)
            if run["status"] != "running":
                raise WorkflowNotRunningError(f"run {run['run_id']} is {run['status']}")
            # Running activities learn about it from their next heartbeat.
            request_cancel_run(tx, namespace, run, reason, tx.now_ms())

        await self._write(op)

    async def terminate(
        self, namespace: str, workflow_id: str, run_id: str | None, reason: str
    ) -> None:
        def op(tx: Tx) -> None:
            run = find_run(tx, namespace, workflow_id, run_id)
            if run["status"] != "running":
                raise WorkflowNotRunningError(f"run {run['run_id']} is {run['status']}")
            now = tx.now_ms()
            append_event(
                tx,
                namespace,
                run["run_id"],
                now,
                "workflow_terminated",
                history_pb2.WorkflowTerminated(reason=reason),
            )
            failure = failure_bytes(reason or "terminated", "WorkflowTerminatedError")
            close_run(tx, namespace, run["run_id"], "terminated", now, failure=failure)

        await self._write(op)

    async def describe(
        self, namespace: str, workflow_id: str, run_id: str | None
    ) -> RunDescription:
        def op(tx: Tx) -> RunDescription:
            run = find_run(tx, namespace, workflow_id, run_id)
            rows = tx.all(
                "SELECT seq, activity_type, state, attempt, last_failure, worker_id FROM tasks "
                "WHERE namespace = ? AND run_id = ? AND kind = 'activity' "
                f"AND state IN {ACTIVE} ORDER BY seq",
                (namespace, run["run_id"]),
            )
            live_since = tx.now_ms() - self._options.worker_liveness_ms
            available = tx.one(
                "SELECT 1 AS live FROM worker_definitions wd JOIN workers w "
                "ON w.namespace = wd.namespace AND w.worker_id = wd.worker_id "
                "WHERE wd.namespace = ? AND wd.name = ? AND wd.version = ? "
                "AND w.last_heartbeat_ms >= ? LIMIT 1",
                (namespace, run["workflow_type"], run["workflow_version"], live_since),
            )
            info = run_info(run)
            attrs = read_search_attributes(tx, namespace, [run["run_id"]])
            info = replace(
                info,
                memo=blob(run["memo"]),
                search_attributes=attrs.get(run["run_id"]),
            )
            return RunDescription(
                info=info,
                pending_activities=[
                    PendingActivity(
                        seq=row["seq"],
                        activity_type=row["activity_type"],
                        state=row["state"],
                        attempt=row["attempt"],
                        last_failure=blob(row["last_failure"]),
                        worker_id=row["worker_id"] if row["state"] == "leased" else None,
                    )
                    for row in rows
                ],
                last_workflow_task_failure=blob(run["last_wft_failure"]),
                workflow_task_attempt=run["wft_attempt"],
                definition_available=available is not None,
                cancel_requested=bool(run["cancel_requested"]),
            )

        return await self._read(op)

    async def get_history(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        after_event_id: int,
        limit: int,
    ) -> HistoryPage:
        if after_event_id < 0:
            raise InvalidArgumentError("after_event_id must not be negative")
        if limit <= 0:
            raise InvalidArgumentError("limit must be positive")

        def op(tx: Tx) -> HistoryPage:
            run = find_run(tx, namespace, workflow_id, run_id)
            rows = tx.all(
                "SELECT data FROM history WHERE namespace = ? AND run_id = ? AND event_id > ? "
                "ORDER BY event_id LIMIT ?",
                (namespace, run["run_id"], after_event_id, limit + 1),
            )
            events = [bytes(row["data"]) for row in rows[:limit]]
            return HistoryPage(run["run_id"], events, has_more=len(rows) > limit)

        return await self._read(op)

    async def get_outcome(self, namespace: str, workflow_id: str, run_id: str | None) -> RunOutcome:
        def op(tx: Tx) -> RunOutcome:
            run = find_run(tx, namespace, workflow_id, run_id)
            next_run_id = None
            if run["status"] == "continued_as_new":
                row = tx.one(
                    "SELECT data FROM history WHERE namespace = ? AND run_id = ? "
                    "AND kind = 'workflow_continued_as_new'",
                    (namespace, run["run_id"]),
                )
                if row is not None:
                    event = history_pb2.HistoryEvent.FromString(blob(row["data"]) or b"")
                    next_run_id = event.workflow_continued_as_new.new_run_id
            return RunOutcome(
                run_id=run["run_id"],
                status=run["status"],
                result=blob(run["result"]),
                failure=blob(run["failure"]),
                next_run_id=next_run_id,
            )

        return await self._read(op)

    async def list_runs(
        self,
        namespace: str,
        status: str | None,
        workflow_type: str | None,
        started_after_ms: int | None,
        started_before_ms: int | None,
        limit: int,
        cursor: str | None,
        query: str | None = None,
    ) -> tuple[list[RunInfo], str | None]:
        if status and status not in RUN_STATUSES:
            raise InvalidArgumentError(f"unknown status {status!r}")
        if limit <= 0:
            raise InvalidArgumentError("limit must be positive")
        limit = min(limit, LIST_LIMIT_MAX)
        where = ["namespace = ?"]
        params: list[object] = [namespace]
        if status:
            where.append("status = ?")
            params.append(status)
        if workflow_type:
            where.append("workflow_type = ?")
            params.append(workflow_type)
        if started_after_ms is not None:
            where.append("start_time_ms >= ?")
            params.append(started_after_ms)
        if started_before_ms is not None:
            where.append("start_time_ms < ?")
            params.append(started_before_ms)
        if cursor:
            try:
                after_id = int(cursor)
            except ValueError as exc:
                raise InvalidArgumentError(f"invalid cursor {cursor!r}") from exc
            where.append("id < ?")
            params.append(after_id)
        if query:
            conditions, values = compile_query(query)
            where.extend(conditions)
            params.extend(values)
        params.append(limit + 1)
        sql = f"SELECT * FROM runs WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?"

        def op(tx: Tx) -> tuple[list[RunInfo], str | None]:
            require_namespace(tx, namespace)
            rows = tx.all(sql, params)
            page = rows[:limit]
            next_cursor = str(page[-1]["id"]) if len(rows) > limit else None
            attrs = read_search_attributes(tx, namespace, [row["run_id"] for row in page])
            infos = [
                replace(
                    run_info(row),
                    memo=blob(row["memo"]),
                    search_attributes=attrs.get(row["run_id"]),
                )
                for row in page
            ]
            return infos, next_cursor

        return await self._read(op)

    # -- workers --------------------------------------------------------------------------

    async def register_worker(
        self,
        namespace: str,
        worker_id: str,
        task_queue: str,
        definitions: Sequence[tuple[str, str, str]],
        activities: Sequence[str],
        build_id: str,
        allow_definition_change: bool,
    ) -> None:
        require(worker_id, "worker_id")
        require(task_queue, "task_queue")
        defs = [(name, version_or_default(version), fp) for name, version, fp in definitions]
        for name, _, fingerprint in defs:
            require(name, "definition name")
            require(fingerprint, f"fingerprint of {name!r}")

        activities_json = json.dumps(list(activities))

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            for name, version, fingerprint in defs:
                known = tx.value(
                    "SELECT fingerprint FROM definitions "
                    "WHERE namespace = ? AND name = ? AND version = ?",
                    (namespace, name, version),
                )
                if known is None:
                    tx.run(
                        "INSERT INTO definitions (namespace, name, version, fingerprint, "
                        "registered_at_ms) VALUES (?, ?, ?, ?, ?)",
                        (namespace, name, version, fingerprint, now),
                    )
                elif known != fingerprint:
                    if not allow_definition_change:
                        raise DefinitionChangedError(
                            f"definition ({name!r}, {version!r}) is registered with "
                            f"fingerprint {known!r}, not {fingerprint!r}"
                        )
                    tx.run(
                        "UPDATE definitions SET fingerprint = ?, registered_at_ms = ? "
                        "WHERE namespace = ? AND name = ? AND version = ?",
                        (fingerprint, now, namespace, name, version),
                    )
            tx.run(
                "INSERT INTO workers (namespace, worker_id, task_queue, build_id, activities, "
                "registered_at_ms, last_heartbeat_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace, worker_id) DO UPDATE SET "
                "task_queue = excluded.task_queue, "
                "build_id = excluded.build_id, activities = excluded.activities, "
                "registered_at_ms = excluded.registered_at_ms, "
                "last_heartbeat_ms = excluded.last_heartbeat_ms",
                (
                    namespace,
                    worker_id,
                    task_queue,
                    build_id,
                    activities_json,
                    now,
                    now,
                ),
            )
            tx.run(
                "DELETE FROM worker_definitions WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )
            for name, version, _ in dict.fromkeys(defs):
                tx.run(
                    "INSERT INTO worker_definitions (namespace, worker_id, name, version) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (namespace, worker_id, name, version),
                )

        await self._write(op)

    async def worker_heartbeat(self, namespace: str, worker_id: str) -> None:
        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            changed = tx.run(
                "UPDATE workers SET last_heartbeat_ms = ? WHERE namespace = ? AND worker_id = ?",
                (tx.now_ms(), namespace, worker_id),
            )
            if not changed:
                raise NotFoundError(f"worker {worker_id!r} is not registered")

        await self._write(op)

    async def deregister_worker(self, namespace: str, worker_id: str) -> None:
        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            tx.run(
                "DELETE FROM worker_definitions WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )
            tx.run(
                "DELETE FROM workers WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )

        await self._write(op)

    # -- workflow tasks -------------------------------------------------------------------

    async def claim_workflow_task(
        self, namespace: str, task_queue: str, worker_id: str, lease_ms: int
    ) -> ClaimedWorkflowTask | None:
        require(worker_id, "worker_id")
        if lease_ms <= 0:
            raise InvalidArgumentError("lease_ms must be positive")

        def op(tx: Tx) -> _WorkflowClaim | None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # One statement: pick the best visible task (queued, waiting and due, or leased
            # with an expired lease), take it over, raise its token.
            return self._lease_workflow_task(
                tx,
                namespace,
                worker_id,
                lease_ms,
                now,
                "SELECT task_id FROM tasks WHERE namespace = ? AND kind = 'workflow' "
                "AND task_queue = ? AND due_ms IS NOT NULL "
                f"AND due_ms <= ? AND state IN {ACTIVE} ORDER BY due_ms, task_id LIMIT 1"
                f"{tx.claim_lock_suffix}",
                (namespace, task_queue, now),
            )

        claim = await self._write(op)
        return None if claim is None else await self._with_history(namespace, worker_id, claim)

    def _lease_workflow_task(
        self,
        tx: Tx,
        namespace: str,
        worker_id: str,
        lease_ms: int,
        now: int,
        pick_sql: str,
        pick_params: Sequence[object],
    ) -> _WorkflowClaim | None:
        """Leases the workflow task `pick_sql` selects (one task_id) to `worker_id`."""
        expires = now + lease_ms
        row = tx.one(
            "UPDATE tasks SET state = 'leased', worker_id = ?, "
            "fencing_token = fencing_token + 1, "
            "attempt = CASE WHEN state = 'leased' THEN attempt + 1 ELSE attempt END, "
            "claimed_at_ms = ?, expires_at_ms = ?, due_ms = ?, "
            "outcome_token = NULL, outcome_kind = NULL "
            f"WHERE task_id = ({pick_sql}) "
            "RETURNING task_id, run_id, fencing_token, attempt",
            (worker_id, now, expires, expires, *pick_params),
        )
        if row is None:
            return None
        run = tx.one(
            "UPDATE runs SET wft_attempt = ? WHERE namespace = ? AND run_id = ? RETURNING *",
            (row["attempt"], namespace, row["run_id"]),
        )
        assert run is not None
        tx.notes.due.add(lease_check_at(expires))
        length = run["history_length"]
        return _WorkflowClaim(
            task_id=row["task_id"],
            fencing_token=row["fencing_token"],
            expires_at_ms=expires,
            now_ms=now,
            attempt=row["attempt"],
            run=run,
            events=(
                _read_history(tx, namespace, row["run_id"], length)
                if length <= INLINE_HISTORY_EVENTS
                else None
            ),
        )

    async def _with_history(
        self, namespace: str, worker_id: str, claim: _WorkflowClaim
    ) -> ClaimedWorkflowTask:
        run = claim.run
        events = claim.events
        if events is None:
            # History is append-only: reading it after the claim committed, up to the
            # length seen by the claim, is the claim's snapshot (big reads stay off the
            # writer).
            events = await self._read(
                lambda tx: _read_history(tx, namespace, run["run_id"], run["history_length"])
            )
        return ClaimedWorkflowTask(
            task_id=claim.task_id,
            worker_id=worker_id,
            fencing_token=claim.fencing_token,
            lease_expires_at_ms=claim.expires_at_ms,
            workflow_time_ms=claim.now_ms,
            attempt=claim.attempt,
            workflow_id=run["workflow_id"],
            run_id=run["run_id"],
            workflow_type=run["workflow_type"],
            workflow_version=run["workflow_version"],
            task_queue=run["task_queue"],
            events=events,
        )

    async def complete_workflow_task_tracked(
        self,
        namespace: str,
        lease: LeaseRef,
        last_seen_event_id: int,
        commands: Sequence[workflow_task_pb2.Command],
        build_id: str = "",
        eager: EagerActivities | None = None,
    ) -> WorkflowTaskCompletion:
        commands = list(commands)
        plan = validate_commands(commands)

        def op(tx: Tx) -> WorkflowTaskCompletion:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = fenced_update(
                tx,
                namespace,
                lease,
                "workflow",
                now,
                "state = 'completed', due_ms = NULL, outcome_token = fencing_token, "
                "outcome_kind = 'completed'",
            )
            if task is None:
                lease_miss(tx, namespace, lease, "workflow", "completed")
                return WorkflowTaskCompletion([], [], 0)
            run = open_run(tx, namespace, task["run_id"])
            if not 0 <= last_seen_event_id <= run["history_length"]:
                raise InvalidArgumentError(
                    f"last_seen_event_id {last_seen_event_id} is outside the history "
                    f"(1..{run['history_length']})"
                )
            # A task that saw no new input and decided nothing (e.g. it only rejected
            # updates) records nothing: rejected updates leave no trace in history.
            self._check_decision(tx, run, plan)
            marker_needed = bool(commands) or saw_new_input(
                tx, namespace, run["run_id"], last_seen_event_id
            )
            return self._record_decision(
                tx,
                run,
                _Decision(
                    lease.worker_id,
                    build_id,
                    last_seen_event_id,
                    task["claimed_at_ms"],
                    commands,
                    plan,
                    eager,
                ),
                marker_needed,
                now,
            )

        return await self._write(op)

    def _check_decision(self, tx: Tx, run: Row, plan: CommandPlan) -> None:
        """The checks of a decision that need stored state (before anything is written):
        new seqs are unused, cancelled timers exist. Raises InvalidArgumentError."""
        namespace: str = run["namespace"]
        run_id: str = run["run_id"]
        if plan.new_seqs:
            marks = ", ".join("?" for _ in plan.new_seqs)
            used = tx.all(
                f"SELECT seq FROM tasks WHERE namespace = ? AND run_id = ? AND seq IN ({marks})",
                (namespace, run_id, *plan.new_seqs),
            )
            if used:
                seqs = sorted(row["seq"] for row in used)
                raise InvalidArgumentError(f"seq {seqs} already used in run {run_id}")
        for timer_seq in plan.cancelled_existing_timers:
            timer = tx.one(
                "SELECT kind FROM tasks WHERE namespace = ? AND run_id = ? AND seq = ?",
                (namespace, run_id, timer_seq),
            )
            if timer is None or timer["kind"] != "timer":
                raise InvalidArgumentError(f"cancel_timer: no timer with seq {timer_seq}")

    def _decision_acceptable(self, tx: Tx, run: Row, plan: CommandPlan) -> bool:
        try:
            self._check_decision(tx, run, plan)
        except InvalidArgumentError:
            return False
        return True

    def _record_decision(
        self, tx: Tx, run: Row, decision: _Decision, marker_needed: bool, now: int
    ) -> WorkflowTaskCompletion:
        """Records a workflow task's decision on an open run, inside the completing
        transaction (the task's fence already checked): the WorkflowTaskCompleted marker,
        one event and effect per command, a follow-up task for input that arrived
        meanwhile, and the eager activity claims. The caller ran ``_check_decision``."""
        namespace: str = run["namespace"]
        run_id: str = run["run_id"]
        commands = decision.commands
        if marker_needed:
            marker = history_pb2.WorkflowTaskCompleted(
                last_seen_event_id=decision.last_seen_event_id,
                worker_id=decision.worker_id,
                build_id=decision.build_id,
            )
            marker.workflow_time.FromMilliseconds(decision.workflow_time_ms)
            append_event(tx, namespace, run_id, now, "workflow_task_completed", marker)
        closed = False
        for command in commands:
            closed = self._apply_command(tx, namespace, run, command, now) or closed
        if not closed:
            self._append_immediate_cancellations(tx, namespace, run_id, commands, now)
            new_input = tx.one(
                "SELECT event_id FROM history WHERE namespace = ? AND run_id = ? "
                f"AND event_id > ? AND kind IN {INPUT_KINDS_SQL} LIMIT 1",
                (namespace, run_id, decision.last_seen_event_id),
            )
            if new_input is not None:
                ensure_workflow_task(tx, namespace, run_id, run["task_queue"], now)
        if run["wft_attempt"] != 1 or run["last_wft_failure"] is not None:
            tx.run(
                "UPDATE runs SET wft_attempt = 1, last_wft_failure = NULL "
                "WHERE namespace = ? AND run_id = ?",
                (namespace, run_id),
            )
        appended = [data for appended_run, data in tx.appended if appended_run == run_id]
        # `run` was read (and, on PostgreSQL, locked) before this operation appended.
        history_length = run["history_length"] + len(appended)
        eager = decision.eager
        eager_seqs = _eager_seqs(commands, eager)
        if closed or eager is None or not eager_seqs or run["task_queue"] != eager.task_queue:
            return WorkflowTaskCompletion([], appended, history_length)
        claimed = self._claim_eager_activities(
            tx, namespace, run_id, run["workflow_id"], decision.worker_id, eager_seqs, now
        )
        on_queue = sum(
            1
            for c in commands
            if c.WhichOneof("kind") == "schedule_activity"
            and (c.schedule_activity.task_queue or run["task_queue"]) == eager.task_queue
        )
        if claimed and len(claimed) == on_queue:
            # Every activity scheduled on that queue went to this worker: waking a
            # poller would only cost it a claim that finds nothing.
            tx.notes.tasks.discard((namespace, run["task_queue"], "activity"))
        return WorkflowTaskCompletion(claimed, appended, history_length)

    def _claim_eager_activities(
        self,
        tx: Tx,
        namespace: str,
        run_id: str,
        workflow_id: str,
        worker_id: str,
        seqs: list[int],
        now: int,
    ) -> list[ClaimedActivityTask]:
        marks = ", ".join("?" for _ in seqs)
        candidates = tx.all(
            "SELECT task_id, task_queue, lease_ms, start_to_close_ms, "
            "schedule_to_close_deadline_ms FROM tasks WHERE namespace = ? AND run_id = ? "
            f"AND kind = 'activity' AND state = 'queued' AND seq IN ({marks}) ORDER BY seq",
            (namespace, run_id, *seqs),
        )
        return [
            self._lease_activity(tx, namespace, c, worker_id, now, workflow_id) for c in candidates
        ]

    def _apply_command(
        self, tx: Tx, namespace: str, run: Row, command: workflow_task_pb2.Command, now: int
    ) -> bool:
        """Appends the command's event and makes its effect; True if it closed the run."""
        run_id: str = run["run_id"]
        kind = command.WhichOneof("kind")
        if kind == "schedule_activity":
            spec = command.schedule_activity
            queue = spec.task_queue or run["task_queue"]
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "activity_scheduled",
                history_pb2.ActivityScheduled(
                    seq=command.seq,
                    activity_type=spec.activity_type,
                    input=spec.input,
                    task_queue=queue,
                    options=spec.options,
                ),
            )
            timeouts = activity_timeouts(spec.options)
            close_deadline = (
                now + timeouts.schedule_to_close_ms
                if timeouts.schedule_to_close_ms is not None
                else None
            )
            start_deadline = (
                now + timeouts.schedule_to_start_ms
                if timeouts.schedule_to_start_ms is not None
                else None
            )
            queue_deadline = earliest(close_deadline, start_deadline)
            tx.run(
                "INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, "
                "due_ms, attempt, fencing_token, seq, activity_type, input, options, lease_ms, "
                "start_to_close_ms, schedule_to_close_deadline_ms, queue_deadline_ms, "
                "created_at_ms) "
                "VALUES (?, ?, 'activity', ?, 'queued', ?, ?, 1, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    namespace,
                    run_id,
                    queue,
                    now,
                    now,
                    command.seq,
                    spec.activity_type,
                    spec.input.SerializeToString(),
                    spec.options.SerializeToString(),
                    timeouts.lease_ms(self._options.default_activity_lease_ms),
                    timeouts.start_to_close_ms,
                    close_deadline,
                    queue_deadline,
                    now,
                ),
            )
            tx.notes.tasks.add((namespace, queue, "activity"))
            if queue_deadline is not None:
                tx.notes.due.add(queue_deadline)
            return False
        if kind == "start_timer":
            due = now + duration_ms(command.start_timer.duration)
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "timer_started",
                history_pb2.TimerStarted(seq=command.seq, duration=command.start_timer.duration),
            )
            tx.run(
                "INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, "
                "due_ms, attempt, fencing_token, seq, created_at_ms) "
                "VALUES (?, ?, 'timer', ?, 'waiting', ?, ?, 1, 0, ?, ?)",
                (namespace, run_id, run["task_queue"], due, due, command.seq, now),
            )
            tx.notes.due.add(due)
            return False
        if kind == "cancel_timer":
            timer_seq = command.cancel_timer.timer_seq
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "timer_cancelled",
                history_pb2.TimerCancelled(seq=timer_seq),
            )
            tx.run(
                "UPDATE tasks SET state = 'cancelled', due_ms = NULL WHERE namespace = ? "
                "AND run_id = ? AND seq = ? AND kind = 'timer' AND state = 'waiting'",
                (namespace, run_id, timer_seq),
            )
            return False
        if kind == "request_cancel_activity":
            self._request_cancel_activity(tx, namespace, run_id, command.seq, now)
            return False
        if kind == "record_marker":
            # Side-effect values and patch markers: history only, no task.
            marker = command.record_marker
            event = history_pb2.MarkerRecorded(seq=command.seq, kind=marker.kind, id=marker.id)
            if marker.HasField("payload"):
                event.payload.CopyFrom(marker.payload)
            append_event(tx, namespace, run_id, now, "marker_recorded", event)
            return False
        if kind == "upsert_search_attributes":
            upsert = command.upsert_search_attributes.search_attributes
            rows = parse_search_attributes(upsert.SerializeToString())
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "search_attributes_upserted",
                history_pb2.SearchAttributesUpserted(search_attributes=upsert),
            )
            write_search_attributes(tx, namespace, run_id, rows)
            return False
        if kind == "accept_update":
            accepted = command.accept_update
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "update_accepted",
                history_pb2.UpdateAccepted(
                    update_id=accepted.update_id,
                    update_name=accepted.update_name,
                    input=accepted.input,
                ),
            )
            return False
        if kind == "complete_update":
            done = command.complete_update
            completed = history_pb2.UpdateCompleted(update_id=done.update_id)
            if done.HasField("failure"):
                completed.failure.CopyFrom(done.failure)
            else:
                completed.result.CopyFrom(done.result)
            append_event(tx, namespace, run_id, now, "update_completed", completed)
            return False
        if kind == "complete_workflow":
            result = command.complete_workflow.result
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "workflow_completed",
                history_pb2.WorkflowCompleted(result=result),
            )
            close_run(tx, namespace, run_id, "completed", now, result=result.SerializeToString())
            return True
        if kind == "fail_workflow":
            failure = command.fail_workflow.failure
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "workflow_failed",
                history_pb2.WorkflowFailed(failure=failure),
            )
            close_run(tx, namespace, run_id, "failed", now, failure=failure.SerializeToString())
            return True
        if kind == "cancel_workflow":
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "workflow_cancelled",
                history_pb2.WorkflowCancelled(),
            )
            cancelled = failure_bytes("workflow cancelled", "CancelledError")
            close_run(tx, namespace, run_id, "cancelled", now, failure=cancelled)
            return True
        if kind == "continue_as_new":
            continue_as_new(tx, namespace, run, command.continue_as_new.input, now)
            return True
        if kind == "start_child_workflow":
            start_child(tx, namespace, run, command, now)
            return False
        if kind == "request_cancel_child_workflow":
            request_child_cancel(tx, namespace, run, command, now)
            return False
        raise InvalidArgumentError(f"unsupported command kind {kind!r}")

    async def request_workflow_task(self, namespace: str, run_id: str) -> bool:
        def op(tx: Tx) -> bool:
            require_namespace(tx, namespace)
            run = tx.one(
                "SELECT status, task_queue FROM runs WHERE namespace = ? AND run_id = ?",
                (namespace, run_id),
            )
            if run is None or run["status"] != "running":
                return False
            ensure_workflow_task(tx, namespace, run_id, run["task_queue"], tx.now_ms())
            return True

        return await self._write(op)

    async def release_workflow_task(self, namespace: str, lease: LeaseRef) -> bool:
        def op(tx: Tx) -> bool:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            released = fenced_update(
                tx,
                namespace,
                lease,
                "workflow",
                now,
                "state = 'queued', worker_id = NULL, expires_at_ms = NULL, "
                "claimed_at_ms = NULL, due_ms = ?, visible_at_ms = ?",
                (now, now),
            )
            if released is None:
                return False
            tx.notes.tasks.add((namespace, released["task_queue"], "workflow"))
            return True

        return await self._write(op)

    async def fail_workflow_task(self, namespace: str, lease: LeaseRef, failure: bytes) -> None:
        parse_failure(failure)
        options = self._options

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = fenced_update(
                tx,
                namespace,
                lease,
                "workflow",
                now,
                "state = 'waiting', attempt = attempt + 1, expires_at_ms = NULL, "
                "outcome_token = fencing_token, outcome_kind = 'failed'",
            )
            if task is None:
                lease_miss(tx, namespace, lease, "workflow", "failed")
                return
            failed_attempt = task["attempt"] - 1
            visible = now + workflow_task_backoff_ms(
                failed_attempt,
                options.workflow_task_initial_backoff_ms,
                options.workflow_task_max_backoff_ms,
            )
            tx.run(
                "UPDATE tasks SET visible_at_ms = ?, due_ms = ? WHERE task_id = ?",
                (visible, visible, task["task_id"]),
            )
            tx.run(
                "UPDATE runs SET last_wft_failure = ?, wft_attempt = ? "
                "WHERE namespace = ? AND run_id = ?",
                (failure, task["attempt"], namespace, task["run_id"]),
            )
            tx.notes.due.add(visible)

        await self._write(op)

    # -- activity tasks -------------------------------------------------------------------

    async def claim_activity_task(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        activity_types: Sequence[str],
    ) -> ClaimedActivityTask | None:
        require(worker_id, "worker_id")
        types = list(dict.fromkeys(activity_types))
        type_filter = ""
        if types:
            type_filter = f" AND activity_type IN ({', '.join('?' for _ in types)})"

        def op(tx: Tx) -> ClaimedActivityTask | None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            candidate = tx.one(
                "SELECT task_id, lease_ms, start_to_close_ms, schedule_to_close_deadline_ms "
                "FROM tasks WHERE namespace = ? AND kind = 'activity' AND task_queue = ? "
                "AND due_ms IS NOT NULL AND due_ms <= ? AND state IN ('queued', 'waiting') "
                f"AND (queue_deadline_ms IS NULL OR queue_deadline_ms > ?){type_filter} "
                f"ORDER BY due_ms, task_id LIMIT 1{tx.claim_lock_suffix}",
                (namespace, task_queue, now, now, *types),
            )
            if candidate is None:
                return None
            return self._lease_activity(tx, namespace, candidate, worker_id, now)

        return await self._write(op)

    def _lease_activity(
        self,
        tx: Tx,
        namespace: str,
        candidate: Row,
        worker_id: str,
        now: int,
        workflow_id: str | None = None,
    ) -> ClaimedActivityTask:
        """Leases the queued/waiting activity task `candidate` (task_id, lease_ms,
        start_to_close_ms, schedule_to_close_deadline_ms) to `worker_id`."""
        start_to_close = candidate["start_to_close_ms"]
        attempt_deadline = earliest(
            now + start_to_close if start_to_close is not None else None,
            candidate["schedule_to_close_deadline_ms"],
        )
        expires = earliest(now + candidate["lease_ms"], attempt_deadline)
        assert expires is not None
        row = tx.one(
            "UPDATE tasks SET state = 'leased', worker_id = ?, "
            "fencing_token = fencing_token + 1, claimed_at_ms = ?, expires_at_ms = ?, "
            "due_ms = ?, attempt_deadline_ms = ?, queue_deadline_ms = NULL, "
            "outcome_token = NULL, outcome_kind = NULL "
            "WHERE task_id = ? AND state IN ('queued', 'waiting') RETURNING *",
            (worker_id, now, expires, expires, attempt_deadline, candidate["task_id"]),
        )
        assert row is not None
        if workflow_id is None:
            workflow_id = tx.value(
                "SELECT workflow_id FROM runs WHERE namespace = ? AND run_id = ?",
                (namespace, row["run_id"]),
            )
        options_bytes = bytes(row["options"])
        timeouts = activity_timeouts(parse_options(options_bytes))
        tx.notes.due.add(lease_check_at(expires))
        return ClaimedActivityTask(
            task_id=row["task_id"],
            worker_id=worker_id,
            fencing_token=row["fencing_token"],
            lease_expires_at_ms=expires,
            workflow_id=str(workflow_id),
            run_id=row["run_id"],
            seq=row["seq"],
            activity_type=row["activity_type"],
            input=bytes(row["input"]),
            attempt=row["attempt"],
            heartbeat_details=blob(row["heartbeat_details"]),
            heartbeat_timeout_ms=timeouts.heartbeat_ms,
            start_to_close_timeout_ms=timeouts.start_to_close_ms,
            options=options_bytes,
        )

    async def heartbeat_activity_task(
        self, namespace: str, lease: LeaseRef, details: bytes | None
    ) -> HeartbeatResult:
        if details is not None:
            parse_payload(details, "heartbeat details")

        def op(tx: Tx) -> HeartbeatResult:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # Extend by the attempt's lease length, never past its start_to_close deadline.
            extended = (
                "CASE WHEN attempt_deadline_ms IS NOT NULL AND attempt_deadline_ms < ? + lease_ms "
                "THEN attempt_deadline_ms ELSE ? + lease_ms END"
            )
            row = fenced_update(
                tx,
                namespace,
                lease,
                "activity",
                now,
                f"expires_at_ms = {extended}, due_ms = {extended}, "
                "heartbeat_details = COALESCE(?, heartbeat_details)",
                (now, now, now, now, details),
            )
            if row is not None:
                return HeartbeatResult(bool(row["cancel_requested"]), row["expires_at_ms"])
            stale = tx.one(
                "SELECT state, worker_id, fencing_token, expires_at_ms FROM tasks "
                "WHERE task_id = ? AND namespace = ? AND kind = 'activity'",
                (lease.task_id, namespace),
            )
            if (
                stale is not None
                and stale["state"] == "cancelled"
                and stale["worker_id"] == lease.worker_id
                and stale["fencing_token"] == lease.fencing_token
            ):
                return HeartbeatResult(True, stale["expires_at_ms"] or now)
            raise LeaseLostError(
                lease_lost_message(lease.task_id, lease.worker_id, lease.fencing_token)
            )

        return await self._write(op)

    async def complete_activity_task_inline(
        self,
        namespace: str,
        lease: LeaseRef,
        result: bytes,
        eager: EagerWorkflowTask | None = None,
        inline: InlineWorkflowTask | None = None,
    ) -> ActivityCompletion:
        payload = parse_payload(result, "result")
        inline_commands = list(inline.commands) if inline is not None else []
        inline_plan = None
        if inline is not None:
            # A decision the server refuses never costs the activity its result: the
            # completion is recorded alone and the ordinary workflow task follows.
            with contextlib.suppress(InvalidArgumentError):
                inline_plan = validate_commands(inline_commands)

        def op(tx: Tx) -> ActivityCompletion | _WorkflowClaim:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = fenced_update(
                tx,
                namespace,
                lease,
                "activity",
                now,
                "state = 'completed', due_ms = NULL, outcome_token = fencing_token, "
                "outcome_kind = 'completed'",
            )
            if task is None:
                lease_miss(tx, namespace, lease, "activity", "completed")
                return ActivityCompletion()
            run = open_run(tx, namespace, task["run_id"])
            event_id = append_event(
                tx,
                namespace,
                task["run_id"],
                now,
                "activity_completed",
                history_pb2.ActivityCompleted(
                    seq=task["seq"],
                    result=payload,
                    attempt=task["attempt"],
                    worker_id=lease.worker_id,
                    fencing_token=lease.fencing_token,
                ),
            )
            if (
                inline is not None
                and inline_plan is not None
                and inline.run_id == task["run_id"]
                and inline.last_seen_event_id + 1 == event_id
                and not has_active_workflow_task(tx, namespace, task["run_id"])
                and self._decision_acceptable(tx, run, inline_plan)
            ):
                # This result is the task's only new input: record the worker's decision
                # as that task, at this transaction's database time, under the
                # activity's fence. No task row is needed for a task nobody can claim.
                decision = _Decision(
                    lease.worker_id,
                    inline.build_id,
                    event_id,
                    now,
                    inline_commands,
                    inline_plan,
                    inline.eager,
                )
                return ActivityCompletion(
                    inline=self._record_decision(tx, run, decision, True, now)
                )
            ensure_workflow_task(tx, namespace, task["run_id"], run["task_queue"], now)
            if eager is None or run["task_queue"] != eager.task_queue:
                return ActivityCompletion()
            # The run's workflow task, if it is claimable right now (not leased elsewhere).
            claim = self._lease_workflow_task(
                tx,
                namespace,
                lease.worker_id,
                eager.lease_ms,
                now,
                "SELECT task_id FROM tasks WHERE namespace = ? AND run_id = ? "
                "AND kind = 'workflow' AND state = 'queued' AND due_ms <= ?"
                f"{tx.claim_lock_suffix}",
                (namespace, task["run_id"], now),
            )
            if claim is None:
                return ActivityCompletion()
            # Nobody else needs waking for the task this worker just took.
            tx.notes.tasks.discard((namespace, run["task_queue"], "workflow"))
            return claim

        done = await self._write(op)
        if isinstance(done, ActivityCompletion):
            return done
        return ActivityCompletion(
            workflow_task=await self._with_history(namespace, lease.worker_id, done)
        )

    async def fail_activity_task(self, namespace: str, lease: LeaseRef, failure: bytes) -> None:
        parsed = parse_failure(failure)

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = fenced_update(
                tx,
                namespace,
                lease,
                "activity",
                now,
                "state = 'failed', due_ms = NULL, last_failure = ?, "
                "outcome_token = fencing_token, outcome_kind = 'failed'",
                (failure,),
            )
            if task is None:
                lease_miss(tx, namespace, lease, "activity", "failed")
                return
            open_run(tx, namespace, task["run_id"])
            if parsed.type == "CancelledError" and self._cancel_requested_by_workflow(tx, task):
                self._record_activity_cancelled(tx, task, now)
                return
            self._retry_or_fail(tx, task, parsed, now, ambiguous=False)

        await self._write(op)

    def _retry_or_fail(
        self, tx: Tx, task: Row, failure: payload_pb2.Failure, now: int, *, ambiguous: bool
    ) -> bool:
        """After an attempt failed (the task row is already `failed`): schedule the retry
        (task `waiting`, no history) or record the final ActivityFailed. True = retried."""
        namespace: str = task["namespace"]
        run_id: str = task["run_id"]
        encoded = failure.SerializeToString()
        options = parse_options(bytes(task["options"]))
        delay = (
            None
            if ambiguous
            else activity_retry_delay_ms(
                options, task["attempt"], failure, now, task["schedule_to_close_deadline_ms"]
            )
        )
        if delay is not None:
            visible = now + delay
            timeouts = activity_timeouts(options)
            queue_deadline = earliest(
                task["schedule_to_close_deadline_ms"],
                visible + timeouts.schedule_to_start_ms
                if timeouts.schedule_to_start_ms is not None
                else None,
            )
            tx.run(
                "UPDATE tasks SET state = 'waiting', attempt = attempt + 1, visible_at_ms = ?, "
                "due_ms = ?, queue_deadline_ms = ?, expires_at_ms = NULL, last_failure = ? "
                "WHERE task_id = ?",
                (visible, visible, queue_deadline, encoded, task["task_id"]),
            )
            tx.notes.due.add(visible)
            return True
        tx.run(
            "UPDATE tasks SET state = 'failed', due_ms = NULL, queue_deadline_ms = NULL, "
            "last_failure = ? WHERE task_id = ?",
            (encoded, task["task_id"]),
        )
        append_event(
            tx,
            namespace,
            run_id,
            now,
            "activity_failed",
            history_pb2.ActivityFailed(
                seq=task["seq"],
                failure=failure,
                attempt=task["attempt"],
                worker_id=task["worker_id"] or "",
                fencing_token=task["fencing_token"],
                ambiguous=ambiguous,
            ),
        )
        queue = tx.value(
            "SELECT task_queue FROM runs WHERE namespace = ? AND run_id = ?", (namespace, run_id)
        )
        ensure_workflow_task(tx, namespace, run_id, str(queue), now)
        return False

    # -- time -----------------------------------------------------------------------------

    def _request_cancel_activity(
        self, tx: Tx, namespace: str, run_id: str, seq: int, now: int
    ) -> None:
        """Workflow code cancelled activity ``seq``: a queued or waiting attempt is
        cancelled at once (ActivityCancelled); a leased one is asked to stop
        (``cancel_requested``, delivered by its heartbeat response) and is cancelled when
        it reports cancellation or its lease expires. An activity that already has an
        outcome keeps it: the request is moot."""
        task = tx.one(
            "SELECT task_id, kind, state, attempt FROM tasks WHERE namespace = ? "
            "AND run_id = ? AND seq = ?",
            (namespace, run_id, seq),
        )
        if task is None or task["kind"] != "activity":
            raise InvalidArgumentError(f"request_cancel_activity: no activity with seq {seq}")
        append_event(
            tx,
            namespace,
            run_id,
            now,
            "activity_cancel_requested",
            history_pb2.ActivityCancelRequested(seq=seq),
        )
        if task["state"] in ("queued", "waiting"):
            # ActivityCancelled is an input event: appended after the task's command
            # events (see _append_immediate_cancellations).
            tx.run(
                "UPDATE tasks SET state = 'cancelled', due_ms = NULL, queue_deadline_ms = NULL "
                "WHERE task_id = ?",
                (task["task_id"],),
            )
        elif task["state"] == "leased":
            tx.run("UPDATE tasks SET cancel_requested = 1 WHERE task_id = ?", (task["task_id"],))

    def _append_immediate_cancellations(
        self,
        tx: Tx,
        namespace: str,
        run_id: str,
        commands: Sequence[workflow_task_pb2.Command],
        now: int,
    ) -> None:
        """ActivityCancelled for each activity this task's RequestCancelActivity
        cancelled at once (it was queued or waiting), after all the command events."""
        for command in commands:
            if command.WhichOneof("kind") != "request_cancel_activity":
                continue
            task = tx.one(
                "SELECT state, attempt FROM tasks WHERE namespace = ? AND run_id = ? "
                "AND seq = ? AND kind = 'activity'",
                (namespace, run_id, command.seq),
            )
            if task is None or task["state"] != "cancelled":
                continue
            # The attempt that was due never started (a waiting task's attempt counts
            # the retry to come).
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "activity_cancelled",
                history_pb2.ActivityCancelled(seq=command.seq, attempt=task["attempt"] - 1),
            )

    def _cancel_requested_by_workflow(self, tx: Tx, task: Row) -> bool:
        """Whether workflow code asked to cancel this activity (an
        ActivityCancelRequested event for its seq; a run cancellation does not count)."""
        if not task["cancel_requested"]:
            return False
        for row in tx.all(
            "SELECT data FROM history WHERE namespace = ? AND run_id = ? "
            "AND kind = 'activity_cancel_requested'",
            (task["namespace"], task["run_id"]),
        ):
            event = history_pb2.HistoryEvent.FromString(blob(row["data"]) or b"")
            if event.activity_cancel_requested.seq == task["seq"]:
                return True
        return False

    def _record_activity_cancelled(self, tx: Tx, task: Row, now: int) -> None:
        """The attempt stopped after a requested cancellation: ActivityCancelled."""
        tx.run(
            "UPDATE tasks SET state = 'cancelled', due_ms = NULL, queue_deadline_ms = NULL "
            "WHERE task_id = ?",
            (task["task_id"],),
        )
        append_event(
            tx,
            task["namespace"],
            task["run_id"],
            now,
            "activity_cancelled",
            history_pb2.ActivityCancelled(seq=task["seq"], attempt=task["attempt"]),
        )
        queue = tx.value(
            "SELECT task_queue FROM runs WHERE namespace = ? AND run_id = ?",
            (task["namespace"], task["run_id"]),
        )
        ensure_workflow_task(tx, task["namespace"], task["run_id"], str(queue), now)

    async def process_due(self) -> DueReport:
        limit = self._options.due_batch

        def op(tx: Tx) -> DueReport:
            now = tx.now_ms()
            saturated = False

            # 1. Timers that are due fire once.
            timers = tx.all(
                "SELECT t.task_id, t.namespace, t.run_id, t.seq, r.task_queue FROM tasks t "
                "JOIN runs r ON r.namespace = t.namespace AND r.run_id = t.run_id "
                "WHERE t.kind = 'timer' AND t.state = 'waiting' AND t.due_ms IS NOT NULL "
                "AND t.due_ms <= ? ORDER BY t.due_ms LIMIT ?",
                (now, limit),
            )
            saturated |= len(timers) >= limit
            fired = 0
            for timer in timers:
                # Conditional: another replica's process_due may have fired it meanwhile.
                if not tx.run(
                    "UPDATE tasks SET state = 'completed', due_ms = NULL "
                    "WHERE task_id = ? AND state = 'waiting'",
                    (timer["task_id"],),
                ):
                    continue
                fired += 1
                append_event(
                    tx,
                    timer["namespace"],
                    timer["run_id"],
                    now,
                    "timer_fired",
                    history_pb2.TimerFired(seq=timer["seq"]),
                )
                ensure_workflow_task(
                    tx, timer["namespace"], timer["run_id"], timer["task_queue"], now
                )

            # 2. Backoffs that ended: the task is claimable now; tell the pollers.
            kinds: tuple[TaskKind, ...] = ("workflow", "activity")
            for kind in kinds:
                released = tx.all(
                    "UPDATE tasks SET state = 'queued' WHERE task_id IN (SELECT task_id "
                    "FROM tasks WHERE kind = ? AND state = 'waiting' AND due_ms IS NOT NULL "
                    f"AND due_ms <= ? ORDER BY due_ms LIMIT ?{tx.claim_lock_suffix}) "
                    "RETURNING namespace, task_queue",
                    (kind, now, limit),
                )
                saturated |= len(released) >= limit
                for row in released:
                    tx.notes.tasks.add((row["namespace"], row["task_queue"], kind))

            # 3. Expired workflow-task leases: the task is claimable again (next attempt).
            expired_wf = tx.all(
                "UPDATE tasks SET state = 'queued', attempt = attempt + 1 WHERE task_id IN ("
                "SELECT task_id FROM tasks WHERE kind = 'workflow' AND state = 'leased' "
                "AND due_ms IS NOT NULL AND due_ms <= ? ORDER BY due_ms LIMIT ?"
                f"{tx.claim_lock_suffix}) RETURNING namespace, run_id, task_queue, attempt",
                (now, limit),
            )
            saturated |= len(expired_wf) >= limit
            for row in expired_wf:
                tx.run(
                    "UPDATE runs SET wft_attempt = ? WHERE namespace = ? AND run_id = ?",
                    (row["attempt"], row["namespace"], row["run_id"]),
                )
                tx.notes.tasks.add((row["namespace"], row["task_queue"], "workflow"))

            # 4. Expired activity leases with no outcome: ambiguous attempts.
            expired = tx.all(
                "SELECT * FROM tasks WHERE kind = 'activity' AND state = 'leased' "
                "AND due_ms IS NOT NULL AND due_ms <= ? ORDER BY due_ms LIMIT ?"
                f"{tx.claim_lock_suffix}",
                (now, limit),
            )
            saturated |= len(expired) >= limit
            for task in expired:
                tx.run(
                    "UPDATE tasks SET state = 'failed', due_ms = NULL, "
                    "outcome_token = fencing_token, outcome_kind = 'expired' WHERE task_id = ?",
                    (task["task_id"],),
                )
                identity = (
                    f"task_id={task['task_id']} attempt={task['attempt']} "
                    f"worker_id={task['worker_id']} fencing_token={task['fencing_token']}"
                )
                options = parse_options(bytes(task["options"]))
                # A cancelled attempt that went silent ends as cancelled; a
                # non-idempotent one stays ambiguous (its effect may have happened).
                if not options.non_idempotent and self._cancel_requested_by_workflow(tx, task):
                    self._record_activity_cancelled(tx, task, now)
                    continue
                if options.non_idempotent:
                    failure = payload_pb2.Failure(
                        type=AMBIGUOUS_EFFECT_ERROR,
                        message=(
                            "the lease of a non-idempotent activity attempt expired with no "
                            f"outcome; its effect may or may not have happened ({identity})"
                        ),
                        non_retryable=True,
                    )
                    self._retry_or_fail(tx, task, failure, now, ambiguous=True)
                else:
                    deadline = task["attempt_deadline_ms"]
                    which = (
                        "start_to_close"
                        if deadline is not None and deadline <= now
                        else "heartbeat/lease"
                    )
                    failure = payload_pb2.Failure(
                        type=ACTIVITY_TIMEOUT_ERROR,
                        message=f"activity attempt timed out ({which}; {identity})",
                    )
                    self._retry_or_fail(tx, task, failure, now, ambiguous=False)

            # 5. Queued/waiting activities past schedule_to_close (or schedule_to_start).
            overdue = tx.all(
                "SELECT * FROM tasks WHERE queue_deadline_ms IS NOT NULL "
                "AND queue_deadline_ms <= ? AND state IN ('queued', 'waiting') "
                f"ORDER BY queue_deadline_ms LIMIT ?{tx.claim_lock_suffix}",
                (now, limit),
            )
            saturated |= len(overdue) >= limit
            for task in overdue:
                tx.run(
                    "UPDATE tasks SET state = 'failed', due_ms = NULL, queue_deadline_ms = NULL "
                    "WHERE task_id = ?",
                    (task["task_id"],),
                )
                failure = payload_pb2.Failure(
                    type=ACTIVITY_TIMEOUT_ERROR,
                    message=(
                        f"activity seq {task['seq']} ({task['activity_type']}) was not completed "
                        "before its schedule deadline"
                    ),
                    non_retryable=True,
                )
                last = blob(task["last_failure"])
                if last:
                    failure.cause.CopyFrom(payload_pb2.Failure.FromString(last))
                append_event(
                    tx,
                    task["namespace"],
                    task["run_id"],
                    now,
                    "activity_failed",
                    history_pb2.ActivityFailed(
                        seq=task["seq"],
                        failure=failure,
                        attempt=task["attempt"] - 1,
                        worker_id=task["worker_id"] or "",
                        fencing_token=task["fencing_token"],
                    ),
                )
                queue = tx.value(
                    "SELECT task_queue FROM runs WHERE namespace = ? AND run_id = ?",
                    (task["namespace"], task["run_id"]),
                )
                ensure_workflow_task(tx, task["namespace"], task["run_id"], str(queue), now)

            # 6. Runs past their execution/run timeout close as timed_out.
            timed_out = tx.all(
                "SELECT namespace, run_id, timeout_kind FROM runs WHERE deadline_ms IS NOT NULL "
                f"AND deadline_ms <= ? ORDER BY deadline_ms LIMIT ?{tx.claim_lock_suffix}",
                (now, limit),
            )
            saturated |= len(timed_out) >= limit
            for run in timed_out:
                timeout_kind = run["timeout_kind"] or "execution"
                if not tx.run(
                    "UPDATE runs SET deadline_ms = NULL WHERE namespace = ? AND run_id = ? "
                    "AND status = 'running' AND deadline_ms IS NOT NULL",
                    (run["namespace"], run["run_id"]),
                ):
                    continue
                append_event(
                    tx,
                    run["namespace"],
                    run["run_id"],
                    now,
                    "workflow_timed_out",
                    history_pb2.WorkflowTimedOut(timeout_kind=timeout_kind),
                )
                close_run(
                    tx,
                    run["namespace"],
                    run["run_id"],
                    "timed_out",
                    now,
                    failure=failure_bytes(
                        f"workflow {timeout_kind} timeout passed", "WorkflowTimedOutError"
                    ),
                )

            next_due = earliest(
                tx.value("SELECT MIN(deadline_ms) AS m FROM runs WHERE deadline_ms IS NOT NULL"),
                tx.value("SELECT MIN(due_ms) AS m FROM tasks WHERE state IN ('waiting', 'leased')"),
                tx.value(
                    "SELECT MIN(queue_deadline_ms) AS m FROM tasks "
                    "WHERE queue_deadline_ms IS NOT NULL"
                ),
            )
            if saturated:
                next_due = now
            return DueReport(
                fired_timers=fired,
                expired_activity_attempts=len(expired),
                next_due_ms=next_due,
                db_now_ms=now,
            )

        return await self._write(op)
