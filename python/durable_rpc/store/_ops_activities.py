"""Activity tasks: claim, heartbeat, complete (with an inline decision), fail, retry and
cancellation outcomes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

from durable_rpc.errors import InvalidArgumentError, LeaseLostError
from durable_rpc.store._build_pins import may_decide
from durable_rpc.store._fairness import DUE_ORDER, READY, READY_ORDER
from durable_rpc.store._history_limits import DecisionPastHistoryLimit
from durable_rpc.store._logic import (
    activity_retry_delay_ms,
    activity_timeouts,
    earliest,
    lease_lost_message,
    parse_failure,
    parse_options,
    parse_payload,
    validate_commands,
)
from durable_rpc.store._ops_leases import _WorkflowClaim
from durable_rpc.store._ops_workflow_tasks import _Decision, _WorkflowTaskOps
from durable_rpc.store._queue_limits import (
    QUEUE_LIMIT_COLUMN,
    QUEUE_LIMITED_RETURNING,
    free_slots,
    mark_deferred,
    slot_freed,
)
from durable_rpc.store._rate_limits import (
    bucket_of,
    next_token_after,
    rate_limited_column,
    rate_open,
    take_token,
)
from durable_rpc.store._records import (
    ActivityCompletion,
    ActivityPoll,
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    EagerWorkflowTask,
    HeartbeatResult,
    InlineWorkflowTask,
    LeaseRef,
)
from durable_rpc.store._sessions import (
    claimable_sessions,
    closed_reason,
    enter,
    fail_for_closed,
    next_lapse_ms,
    record_of,
    renew_for,
    session_slot_freed,
    worker_config,
)
from durable_rpc.store._shared import (
    append_event,
    blob,
    ensure_workflow_task,
    fenced_update,
    has_active_workflow_task,
    open_run,
    record_outcome,
    require,
    require_namespace,
)
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2, payload_pb2

# Which activity tasks a worker may claim (a condition on ``tasks t``; params: namespace,
# worker_id, worker_id): those of the activity types it registered with RegisterWorker
# (``worker_activities``), whatever its poll asks for; a worker id that never registered
# is served every type (see ``_ops_leases.SERVED_BY_WORKER``). A hashed subplan of the
# worker's own types on PostgreSQL: the claim stays the ordered index scan.
SERVED_ACTIVITIES = (
    "(NOT EXISTS (SELECT 1 FROM workers w WHERE w.namespace = ? AND w.worker_id = ?) "
    "OR EXISTS (SELECT 1 FROM worker_activities wa WHERE wa.namespace = t.namespace "
    "AND wa.worker_id = ? AND wa.activity_type = t.activity_type))"
)


class _ActivityOps(_WorkflowTaskOps):
    """The activity-task operations (a completion may record the run's next workflow
    task: hence the workflow-task part underneath)."""

    async def claim_activity_task(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        activity_types: Sequence[str],
    ) -> ClaimedActivityTask | None:
        poll = await self.poll_activity_task(namespace, task_queue, worker_id, activity_types)
        return poll.task

    async def poll_activity_task(
        self,
        namespace: str,
        task_queue: str,
        worker_id: str,
        activity_types: Sequence[str],
    ) -> ActivityPoll:
        """``claim_activity_task`` for a long poll: with no task, also when a task held
        back by a rate limit may be claimable (``ActivityPoll.retry_in_ms``)."""
        require(worker_id, "worker_id")
        types = list(dict.fromkeys(activity_types))
        type_filter = ""
        if types:
            type_filter = f" AND activity_type IN ({', '.join('?' for _ in types)})"

        def op(tx: Tx) -> ActivityPoll:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # A worker that registered no sessions never claims a session's activity; one
            # that did claims those of the sessions it may enter now (``_sessions``).
            config = worker_config(tx, namespace, worker_id)
            sessions = (
                claimable_sessions(tx, namespace, task_queue, worker_id, config, now)
                if config is not None
                else []
            )
            session_filter = " AND (session_id IS NULL"
            if sessions:
                session_filter += f" OR session_id IN ({', '.join('?' for _ in sessions)})"
            session_filter += ")"

            def where(visible: str) -> str:
                return (
                    "FROM tasks t WHERE namespace = ? AND kind = 'activity' AND task_queue = ? "
                    f"AND {visible} "
                    f"AND (queue_deadline_ms IS NULL OR queue_deadline_ms > ?){type_filter} "
                    f"AND {SERVED_ACTIVITIES}{session_filter}"
                )

            rest = (now, *types, namespace, worker_id, worker_id, *sessions)
            due = "due_ms IS NOT NULL AND due_ms <= ? AND state "
            # The first queued task in the claim order (``_fairness``: priority, pass, id,
            # read from tasks_ready; a queued task is visible, no due_ms condition, which
            # would make SQLite sort the backlog by another index); only when none is, the
            # first due retry whose backoff ended (the due pass makes those queued too).
            candidate = None
            for visible, due_now, order in (
                (READY, (), READY_ORDER),
                (due + "= 'waiting'", (now,), DUE_ORDER),
            ):
                candidate = tx.one(
                    "SELECT task_id, session_id, lease_ms, start_to_close_ms, "
                    "schedule_to_close_deadline_ms, "
                    f"{QUEUE_LIMIT_COLUMN}, {rate_limited_column('t')} {where(visible)} "
                    f"AND {rate_open('t', '?')}{order}{tx.claim_lock_suffix}",
                    (namespace, task_queue, *due_now, *rest, namespace, now),
                )
                if candidate is not None:
                    break
            if candidate is None:
                # Tasks held back by an empty bucket are not candidates: the poll looks
                # again when the next token is due (only a namespace with an empty
                # bucket asks whether the claim was deferred by it).
                token_at = next_token_after(tx, namespace, now)
                held = where(due + "IN ('queued', 'waiting')")
                params = (namespace, task_queue, now, *rest)
                if token_at is not None and tx.one(f"SELECT 1 AS held {held} LIMIT 1", params):
                    self._stats.rate_deferred_claims += 1
                if config is not None:
                    # A session held elsewhere may be lost (and enterable) at its lease's
                    # end: nothing wakes the poll then.
                    token_at = earliest(
                        token_at, next_lapse_ms(tx, namespace, task_queue, worker_id, now)
                    )
                return ActivityPoll(None, None if token_at is None else token_at - now)
            if candidate["queue_limit"] is not None and not free_slots(tx, namespace, task_queue):
                # Deferred, not failed: the task stays queued for the claim after the
                # next attempt's outcome on this queue (which wakes the polls).
                mark_deferred(tx, namespace, task_queue)
                self._stats.deferred_claims += 1
                return ActivityPoll(None)
            if candidate["rate_limited"] is not None:
                scope, name = bucket_of(candidate["rate_key"], candidate["rate_type"])
                token_at = take_token(tx, namespace, scope, name, now)
                if token_at is not None:
                    # Another claim took the last token after the SELECT read the
                    # bucket: deferred, the task stays queued.
                    self._stats.rate_deferred_claims += 1
                    return ActivityPoll(None, token_at - now)
            session = None
            if candidate["session_id"] is not None:
                session = enter(tx, namespace, candidate["session_id"], worker_id, now)
                if session is None:
                    # Another claim entered the session first (its holder or last slot):
                    # nothing written; the poll looks again at once.
                    return ActivityPoll(None, 0)
            claimed = self._lease_activity(tx, namespace, candidate, worker_id, now)
            if session is not None:
                claimed = replace(claimed, session=record_of(session, now))
            return ActivityPoll(claimed)

        return await self._write(op)

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
            if row is not None and row["expires_at_ms"] > now:
                session = None
                if row["session_id"] is not None:
                    # Heartbeats renew the session holder's lease (never its TTL).
                    session = renew_for(tx, namespace, row["session_id"], lease.worker_id, now)
                return HeartbeatResult(bool(row["cancel_requested"]), row["expires_at_ms"], session)
            if row is not None:
                # A lease revived past the attempt's start_to_close deadline cannot be
                # extended: that attempt is over (raising undoes the revival).
                raise LeaseLostError(
                    lease_lost_message(lease.task_id, lease.worker_id, lease.fencing_token)
                )
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

    async def complete_activity_task(
        self,
        namespace: str,
        lease: LeaseRef,
        result: bytes,
        eager: EagerWorkflowTask | None = None,
    ) -> ClaimedWorkflowTask | None:
        """Records the leased attempt's result; the run's next workflow task when
        ``eager`` had it claimed in the same transaction."""
        completion = await self.complete_activity_task_inline(namespace, lease, result, eager)
        return completion.workflow_task

    async def complete_activity_task_inline(
        self,
        namespace: str,
        lease: LeaseRef,
        result: bytes,
        eager: EagerWorkflowTask | None = None,
        inline: InlineWorkflowTask | None = None,
    ) -> ActivityCompletion:
        """``complete_activity_task``, recording ``inline`` with it when it still holds."""
        payload = parse_payload(result, "result")
        inline_commands = list(inline.commands) if inline is not None else []
        inline_plan = None
        if inline is not None:
            # A decision the server refuses never costs the activity its result: the
            # completion is recorded alone and the ordinary workflow task follows.
            with contextlib.suppress(InvalidArgumentError):
                inline_plan = validate_commands(inline_commands)

        def op(
            tx: Tx, inline: InlineWorkflowTask | None = inline
        ) -> ActivityCompletion | _WorkflowClaim:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = record_outcome(
                tx,
                namespace,
                lease,
                "activity",
                now,
                "completed",
                "state = 'completed', due_ms = NULL",
                returning=QUEUE_LIMITED_RETURNING,
            )
            if task is None:
                return ActivityCompletion()
            slot_freed(tx, task)
            session_slot_freed(tx, task)
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
                # Update requests wait for the run's next task: decide that one the
                # ordinary way, with them.
                and not run["pending_updates"]
                and not has_active_workflow_task(tx, namespace, task["run_id"])
                # A run pinned to another build is decided by that build's worker.
                and may_decide(tx, run, lease.worker_id)
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
                "namespace = ? AND run_id = ? AND kind = 'workflow' AND state = 'queued' "
                "AND due_ms <= ?",
                (namespace, task["run_id"], now),
            )
            if claim is None:
                return ActivityCompletion()
            # Nobody else needs waking for the task this worker just took.
            tx.notes.tasks.discard((namespace, run["task_queue"], "workflow"))
            return claim

        try:
            done = await self._write(op)
        except DecisionPastHistoryLimit:
            # The inline decision took the run past its history limit: the completion is
            # recorded alone (its result is never lost) and the ordinary workflow task
            # that follows fails the run (complete_workflow_task_tracked).
            done = await self._write(lambda tx: op(tx, None))
        if isinstance(done, ActivityCompletion):
            return done
        return ActivityCompletion(
            workflow_task=await self._with_history(namespace, lease.worker_id, done)
        )

    async def fail_activity_task(
        self, namespace: str, lease: LeaseRef, failure: bytes
    ) -> int | None:
        """Fail the leased attempt: the delay in ms before its retry, None when it is not
        retried (failed for good, cancelled, or this lease's outcome already recorded)."""
        parsed = parse_failure(failure)

        def op(tx: Tx) -> int | None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = record_outcome(
                tx,
                namespace,
                lease,
                "activity",
                now,
                "failed",
                "state = 'failed', due_ms = NULL, last_failure = ?",
                (failure,),
                QUEUE_LIMITED_RETURNING,
            )
            if task is None:
                return None
            slot_freed(tx, task)
            session_slot_freed(tx, task)
            open_run(tx, namespace, task["run_id"])
            if parsed.type == "CancelledError" and self._cancel_requested_by_workflow(tx, task):
                self._record_activity_cancelled(tx, task, now)
                return None
            return self._retry_or_fail(tx, task, parsed, now, ambiguous=False)

        return await self._write(op)

    def _retry_or_fail(
        self, tx: Tx, task: Row, failure: payload_pb2.Failure, now: int, *, ambiguous: bool
    ) -> int | None:
        """After an attempt failed (the task row is already `failed`): schedule the retry
        (task `waiting`, no history) or record the final ActivityFailed. The retry's
        delay in ms, None when it failed for good."""
        namespace: str = task["namespace"]
        run_id: str = task["run_id"]
        closed = task["session_id"] and closed_reason(tx, namespace, task["session_id"])
        if closed:
            # The attempt's session closed while it ran: no retry can run in it.
            fail_for_closed(tx, task, closed, now)
            return None
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
            return delay
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
        return None

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
