"""Time: ``process_due`` fires timers, ends backoffs and expired leases, enforces deadlines."""

from __future__ import annotations

from durable_rpc.store._admission import admit_waiting, due_namespaces, next_admit_ms
from durable_rpc.store._budgets import grant_due, next_grant_ms
from durable_rpc.store._logic import (
    ACTIVITY_TIMEOUT_ERROR,
    AMBIGUOUS_EFFECT_ERROR,
    earliest,
    failure_bytes,
    parse_options,
)
from durable_rpc.store._ops_activities import _ActivityOps
from durable_rpc.store._records import DueReport, TaskKind
from durable_rpc.store._run_close import close_run, terminate_after_cleanup
from durable_rpc.store._sessions import expire_due, next_expiry_ms
from durable_rpc.store._shared import (
    CLEANUP_TIMEOUT_KIND,
    append_event,
    blob,
    ensure_workflow_task,
)
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import history_pb2, payload_pb2


class _DueOps(_ActivityOps):
    """``process_due`` (an expired activity attempt ends like a failed one)."""

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
            # Marked `expired` under the old token: the holder's late report still wins
            # until someone claims the task (see fenced_update).
            expired_wf = tx.all(
                # Visible again from now: its queue delay counts from the expiry.
                "UPDATE tasks SET state = 'queued', attempt = attempt + 1, visible_at_ms = ?, "
                "outcome_token = fencing_token, outcome_kind = 'expired' WHERE task_id IN ("
                "SELECT task_id FROM tasks WHERE kind = 'workflow' AND state = 'leased' "
                "AND due_ms IS NOT NULL AND due_ms <= ? ORDER BY due_ms LIMIT ?"
                f"{tx.claim_lock_suffix}) RETURNING namespace, run_id, task_queue, attempt",
                (now, now, limit),
            )
            saturated |= len(expired_wf) >= limit
            for row in expired_wf:
                tx.run(
                    "UPDATE runs SET wft_attempt = ? WHERE namespace = ? AND run_id = ?",
                    (row["attempt"], row["namespace"], row["run_id"]),
                )
                tx.notes.tasks.add((row["namespace"], row["task_queue"], "workflow"))

            # 4. Expired activity leases with no outcome: ambiguous attempts. A retry keeps
            # the `expired` mark and the token, so the holder's late report still wins
            # until someone claims the retry; a final outcome (ambiguous, exhausted,
            # cancelled) ends the attempt for good (see fenced_update).
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

            # 5b. Worker sessions past their TTL close; their queued activities fail.
            saturated |= expire_due(tx, now, limit) >= limit

            # 6. Runs past their execution/run timeout close as timed_out; runs past the
            # cleanup deadline of their cancellation request are terminated.
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
                if timeout_kind == CLEANUP_TIMEOUT_KIND:
                    terminate_after_cleanup(tx, run["namespace"], run["run_id"], now)
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

            # 7. Namespaces whose runs wait for admission's next token (rate): admit them
            # (``admit_waiting`` locks the policy row: once across replicas).
            for namespace in due_namespaces(tx, now):
                admit_waiting(tx, namespace)

            # 8. Budgets whose waiting reservation fits now that spent units came back
            # (a refill rate; ``grant_due`` locks each budget row: once across replicas).
            grant_due(tx, now)

            next_due = earliest(
                next_admit_ms(tx),
                next_expiry_ms(tx),
                next_grant_ms(tx),
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
