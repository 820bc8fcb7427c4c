"""Runs: start, signal, signal-with-start, cancel, terminate, describe, history, outcome,
list.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace

from durable_rpc.errors import (
    AdmissionLimitError,
    InvalidArgumentError,
    WorkflowAlreadyStartedError,
    WorkflowNotRunningError,
)
from durable_rpc.store._admission_start import cancel_waiting_run
from durable_rpc.store._declared_signals import DECLARED_SIGNALS, refuse_undeclared
from durable_rpc.store._history_limits import refuse_input, warning
from durable_rpc.store._history_pages import read_page
from durable_rpc.store._liveness import definition_served
from durable_rpc.store._logic import failure_bytes, parse_payload
from durable_rpc.store._ops_leases import _LeaseOps, _WorkflowClaim, definition_unavailable_reason
from durable_rpc.store._ops_redrive import redriven_by
from durable_rpc.store._records import (
    DirectClaim,
    HistoryPage,
    PendingActivity,
    RunDescription,
    RunInfo,
    RunOutcome,
    SignalWithStartResult,
    StartOptions,
    StartResult,
)
from durable_rpc.store._run_close import close_run
from durable_rpc.store._run_filter import run_filter
from durable_rpc.store._runs import (
    check_start,
    create_run,
    deliver_signal,
    earlier_start,
    open_run_of,
    record_start_request,
    signal_seen,
)
from durable_rpc.store._search import read_search_attributes
from durable_rpc.store._shared import (
    ACTIVE,
    LIST_LIMIT_MAX,
    append_event,
    blob,
    find_run,
    request_cancel_run,
    require,
    require_namespace,
    run_info,
)
from durable_rpc.store._stuck import stuck_reason
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import history_pb2


class _RunOps(_LeaseOps):
    """The run operations (a start may claim the first workflow task)."""

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
        version, payload, checked = check_start(
            workflow_id, workflow_type, workflow_version, task_queue, input, options
        )

        if claim_for is not None:
            require(claim_for.worker_id, "worker_id")
            if claim_for.lease_ms <= 0:
                raise InvalidArgumentError("lease_ms must be positive")

        def op(tx: Tx) -> StartResult | tuple[str, _WorkflowClaim]:
            require_namespace(tx, namespace)
            new_run_id = str(uuid.uuid4())
            earlier = record_start_request(tx, namespace, workflow_id, request_id, new_run_id)
            if earlier is not None:
                return StartResult(earlier, started=False)
            running = open_run_of(tx, namespace, workflow_id)
            if running is not None:
                # (The request's record rolls back with this error.)
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
                run_id=new_run_id,
                request_recorded=True,
                admitted=False,
            )
            self._stats.deferred_starts += tx.deferred_starts
            if tx.deferred_starts:  # no workflow task to claim until it is admitted
                return StartResult(run_id, started=True)
            refuse_input(tx, self._options.history, namespace, run_id, "start")
            if claim_for is None:
                return StartResult(run_id, started=True)
            claim = self._lease_workflow_task(
                tx,
                namespace,
                claim_for.worker_id,
                claim_for.lease_ms,
                tx.now_ms(),
                "namespace = ? AND run_id = ? AND kind = 'workflow' AND state = 'queued'",
                (namespace, run_id),
            )
            if claim is None:  # the poller's worker does not serve the run's definition
                return StartResult(run_id, started=True)
            # The poller it is claimed for needs no wake-up; others would find nothing.
            tx.notes.tasks.discard((namespace, task_queue, "workflow"))
            return run_id, claim

        try:
            done = await self._write(op)
        except AdmissionLimitError:
            self._stats.refused_starts += 1
            raise
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
            # The set the run's code declared comes with the run: no statement more.
            run = find_run(tx, namespace, workflow_id, run_id, DECLARED_SIGNALS)
            if signal_seen(tx, namespace, run["run_id"], request_id):
                return False
            if run["status"] != "running":
                raise WorkflowNotRunningError(f"run {run['run_id']} is {run['status']}")
            refuse_undeclared(run["declared_signals"], signal_name, run["run_id"])
            deliver_signal(
                tx, namespace, run["run_id"], run["task_queue"], signal_name, payload, request_id
            )
            refuse_input(
                tx, self._options.history, namespace, run["run_id"], f"signal {signal_name!r}"
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
        """Signal the open run of ``workflow_id``, or start one and signal it, in one
        transaction. ``request_id`` deduplicates both the start and the signal."""
        version, start_payload, checked = check_start(
            workflow_id, workflow_type, workflow_version, task_queue, input, options
        )
        require(signal_name, "signal_name")
        signal_payload = parse_payload(signal_input, "signal input")

        def op(tx: Tx) -> SignalWithStartResult:
            require_namespace(tx, namespace)
            run = open_run_of(tx, namespace, workflow_id, DECLARED_SIGNALS)
            if run is not None:
                run_id = str(run["run_id"])
                if signal_seen(tx, namespace, run_id, request_id):
                    return SignalWithStartResult(run_id, started=False, delivered=False)
                refuse_undeclared(run["declared_signals"], signal_name, run_id)
                deliver_signal(
                    tx,
                    namespace,
                    run_id,
                    run["task_queue"],
                    signal_name,
                    signal_payload,
                    request_id,
                )
                refuse_input(
                    tx, self._options.history, namespace, run_id, f"signal {signal_name!r}"
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
                admitted=False,
            )
            self._stats.deferred_starts += tx.deferred_starts
            # The new run's code may not read this signal: refused, and the raise rolls
            # the start back with it (the one statement more of a start by signal).
            declared = tx.one(
                f"SELECT {DECLARED_SIGNALS} FROM runs WHERE namespace = ? AND run_id = ?",
                (namespace, run_id),
            )
            assert declared is not None
            refuse_undeclared(declared["declared_signals"], signal_name, run_id)
            # Recorded right after WorkflowStarted and before any workflow task ran, so
            # the first activation carries both: handlers see it before the main method.
            deliver_signal(
                tx, namespace, run_id, task_queue, signal_name, signal_payload, request_id
            )
            refuse_input(tx, self._options.history, namespace, run_id, "signal-with-start")
            return SignalWithStartResult(run_id, started=True, delivered=True)

        try:
            return await self._write(op)
        except AdmissionLimitError:
            self._stats.refused_starts += 1
            raise

    async def request_cancel(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        reason: str,
        cleanup_timeout_ms: int | None = None,
    ) -> bool:
        """Asks the open run to cancel; False when it had been asked already (nothing
        recorded again, the first request's cleanup deadline kept). With
        ``cleanup_timeout_ms`` the run is terminated (reason CLEANUP_DEADLINE_EXCEEDED)
        by the due pass when still open that long after the request (database clock)."""

        def op(tx: Tx) -> bool:
            run = find_run(tx, namespace, workflow_id, run_id)
            if run["status"] != "running":
                raise WorkflowNotRunningError(f"run {run['run_id']} is {run['status']}")
            if run["admission"] is not None:  # not yet admitted: closed at once
                cancel_waiting_run(tx, namespace, run["run_id"], reason)
                return True
            request_cancel_run(tx, namespace, run, reason, tx.now_ms(), cleanup_timeout_ms)
            return not run["cancel_requested"]

        return await self._write(op)

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
                "SELECT seq, activity_type, state, attempt, last_failure, worker_id, due_ms, "
                "expires_at_ms, heartbeat_details, session_id FROM tasks "
                "WHERE namespace = ? AND run_id = ? AND kind = 'activity' "
                f"AND state IN {ACTIVE} ORDER BY seq",
                (namespace, run["run_id"]),
            )
            available = definition_served(tx, self._options, namespace, run)
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
                        next_attempt_ms=row["due_ms"] if row["state"] == "waiting" else None,
                        lease_expires_ms=(
                            row["expires_at_ms"] if row["state"] == "leased" else None
                        ),
                        heartbeat_details=blob(row["heartbeat_details"]),
                        session_id=row["session_id"],
                    )
                    for row in rows
                ],
                last_workflow_task_failure=blob(run["last_wft_failure"]),
                workflow_task_attempt=run["wft_attempt"],
                definition_available=available,
                cancel_requested=bool(run["cancel_requested"]),
                history_warning=warning(
                    self._options.history, run["history_length"], run["history_size_bytes"]
                ),
                definition_unavailable_reason=(
                    definition_unavailable_reason(run)
                    if not available and run["status"] == "running"
                    else ""
                ),
                stuck_reason=stuck_reason(tx, self._options, namespace, run, available),
                build_id=run["build_id"] or "",
                redriven_from_run_id=run["redriven_from_run_id"] or "",
                redriven_by_run_id=redriven_by(tx, namespace, run["run_id"]) or "",
                priority=run["priority"],
                fairness_key=run["fairness_key"] or "",
            )

        return await self._read(op)

    async def get_history(
        self,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        after_event_id: int,
        limit: int,
        through_event_id: int | None = None,
    ) -> HistoryPage:
        """Events after ``after_event_id`` (through ``through_event_id`` if given): at most
        ``limit`` and ``StoreOptions.history.page_bytes`` bytes (a larger single event
        alone), so a page always fits a message; ``has_more`` when more remain."""
        if after_event_id < 0:
            raise InvalidArgumentError("after_event_id must not be negative")
        if limit <= 0:
            raise InvalidArgumentError("limit must be positive")
        page_bytes = self._options.history.page_bytes

        def op(tx: Tx) -> HistoryPage:
            run = find_run(tx, namespace, workflow_id, run_id)
            events, has_more = read_page(
                tx, namespace, run["run_id"], after_event_id, through_event_id, limit, page_bytes
            )
            return HistoryPage(run["run_id"], events, has_more=has_more)

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

        # The continued-as-new event was committed with the status that sends us to it.
        return await self._read_latest(op)

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
        """Newest first. ``query`` is the list query language (``_search``)."""
        if limit <= 0:
            raise InvalidArgumentError("limit must be positive")
        limit = min(limit, LIST_LIMIT_MAX)
        where, params = run_filter(
            namespace, status, workflow_type, started_after_ms, started_before_ms, query
        )
        if cursor:
            # A row id this store issued: ASCII digits that fit a 64-bit column (int()
            # alone takes "-5", " 7" and other scripts' digits, and any size).
            if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 18):
                raise InvalidArgumentError("invalid cursor: not one this store issued")
            after_id = int(cursor)
            where.append("id < ?")
            params.append(after_id)
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

    async def count_runs(
        self,
        namespace: str,
        status: str | None,
        workflow_type: str | None,
        started_after_ms: int | None,
        started_before_ms: int | None,
        query: str | None = None,
    ) -> dict[str, int]:
        """The runs ``list_runs`` with the same filter would list, counted by status (a
        status no run has is absent); one grouped statement, no paging."""
        where, params = run_filter(
            namespace, status, workflow_type, started_after_ms, started_before_ms, query
        )
        # One grouped statement: every status is counted in the same snapshot, and the
        # namespace(+status) prefix of runs_by_status serves it without reading the rows.
        sql = f"SELECT status, count(*) AS n FROM runs WHERE {' AND '.join(where)} GROUP BY status"

        def op(tx: Tx) -> dict[str, int]:
            require_namespace(tx, namespace)
            return {str(row["status"]): int(row["n"]) for row in tx.all(sql, params)}

        return await self._read(op)
