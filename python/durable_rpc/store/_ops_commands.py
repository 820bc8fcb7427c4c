"""The effects of a workflow task's commands: one event and one effect per command."""

from __future__ import annotations

import json
from collections.abc import Sequence

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store import _budgets
from durable_rpc.store._child_retry import retry_child_run
from durable_rpc.store._children import request_child_cancel, signal_external, start_child
from durable_rpc.store._fairness import DEFAULT_PRIORITY, outranked_column, prioritize
from durable_rpc.store._logic import activity_timeouts, duration_ms, earliest, failure_bytes
from durable_rpc.store._memo import upsert_memo
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._ops_updates import settle_update
from durable_rpc.store._rate_limits import rate_limited_column
from durable_rpc.store._run_close import close_run
from durable_rpc.store._runs import continue_as_new
from durable_rpc.store._search import parse_search_attributes, write_search_attributes
from durable_rpc.store._sessions import fail_for_closed, schedule_into
from durable_rpc.store._shared import append_event
from durable_rpc.store._streams import append_items, record_read
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2, options_pb2, payload_pb2, workflow_task_pb2


def queue_timer(
    tx: Tx, namespace: str, run_id: str, task_queue: str, seq: int, due: int, now: int
) -> None:
    """The waiting task that fires timer ``seq`` at ``due`` (its TimerStarted is the
    caller's: a decision appends it, a redrive copies it)."""
    tx.run(
        "INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, "
        "due_ms, attempt, fencing_token, seq, created_at_ms) "
        "VALUES (?, ?, 'timer', ?, 'waiting', ?, ?, 1, 0, ?, ?)",
        (namespace, run_id, task_queue, due, due, seq, now),
    )
    tx.notes.due.add(due)


class _CommandOps(_SqlOpsBase):
    """Applies a decision's commands, inside the completing transaction."""

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
            self._queue_activity(
                tx,
                namespace,
                run_id,
                command.seq,
                spec.activity_type,
                spec.input,
                queue,
                spec.options,
                dict(spec.trace_context),
                now,
                fair=(run["priority"], run["fairness_key"]),
            )
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
            queue_timer(tx, namespace, run_id, run["task_queue"], command.seq, due, now)
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
            if marker.HasField("details"):
                event.details.CopyFrom(marker.details)
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
        if kind == "upsert_memo":
            upsert_memo(tx, namespace, run_id, command.upsert_memo.memo, now)
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
            if run["pending_updates"]:
                settle_update(tx, namespace, run_id, accepted.update_id, None)
            else:
                tx.notes.updates.append((namespace, accepted.update_id))
            return False
        if kind == "complete_update":
            done = command.complete_update
            completed = history_pb2.UpdateCompleted(update_id=done.update_id)
            if done.HasField("failure"):
                completed.failure.CopyFrom(done.failure)
            else:
                completed.result.CopyFrom(done.result)
            append_event(tx, namespace, run_id, now, "update_completed", completed)
            tx.notes.updates.append((namespace, done.update_id))
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
            # A failed child run may go on with its next attempt (its retry policy).
            close_run(
                tx,
                namespace,
                run_id,
                "failed",
                now,
                failure=failure.SerializeToString(),
                retry_child=retry_child_run,
            )
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
            continue_as_new(tx, namespace, run, command.continue_as_new, now)
            return True
        if kind == "start_child_workflow":
            start_child(tx, namespace, run, command, now)
            return False
        if kind == "request_cancel_child_workflow":
            request_child_cancel(tx, namespace, run, command, now)
            return False
        if kind == "signal_external_workflow":
            signal_external(tx, namespace, run, command, now)
            return False
        if kind == "reserve_budget":
            reservation = command.reserve_budget
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "budget_reservation_requested",
                history_pb2.BudgetReservationRequested(
                    seq=command.seq, budget=reservation.budget, amount=reservation.amount
                ),
            )
            _budgets.reserve(
                tx, namespace, run_id, command.seq, reservation.budget, reservation.amount, now
            )
            return False
        if kind == "release_budget":
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "budget_released",
                history_pb2.BudgetReleased(seq=command.seq),
            )
            _budgets.release(tx, namespace, run_id, command.seq, now)
            return False
        if kind == "read_stream":
            read = command.read_stream
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "stream_read_requested",
                history_pb2.StreamReadRequested(
                    seq=command.seq,
                    stream=read.stream,
                    offset=read.offset,
                    limit=read.limit,
                    wait=read.wait,
                ),
            )
            record_read(tx, namespace, run, command.seq, read, now)
            return False
        if kind == "append_to_stream":
            appending = command.append_to_stream
            stream = appending.stream
            # The command's seq deduplicates: a decision is recorded once, and replay
            # never sends a recorded command again.
            items = [(f"@{command.seq}:{i}", item) for i, item in enumerate(appending.items)]
            offsets, _ = append_items(tx, namespace, run, stream, items, now, deciding=True)
            append_event(
                tx,
                namespace,
                run_id,
                now,
                "stream_appended",
                history_pb2.StreamAppended(
                    seq=command.seq,
                    stream=stream,
                    first_offset=offsets[0],
                    count=len(offsets),
                ),
            )
            return False
        raise InvalidArgumentError(f"unsupported command kind {kind!r}")

    def _queue_activity(
        self,
        tx: Tx,
        namespace: str,
        run_id: str,
        seq: int,
        activity_type: str,
        input: payload_pb2.Payload,
        queue: str,
        options: options_pb2.ActivityOptions,
        trace_context: dict[str, str],
        now: int,
        fair: tuple[int, str | None] = (DEFAULT_PRIORITY, None),
    ) -> None:
        """Queues attempt 1 of activity ``seq`` (its ActivityScheduled is the caller's:
        a decision appends it, a redrive copies it); its timeouts count from ``now``.
        ``fair``: the run's (priority, fairness key), which the task takes (the priority
        unless ``options.priority`` sets the activity's own)."""
        if options.priority:
            # The activity's own priority outranks the run's; the run's key still applies.
            fair = (options.priority, fair[1])
        timeouts = activity_timeouts(options)
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
        lease_ms = timeouts.lease_ms(self._options.default_activity_lease_ms)
        session_id = closed = None
        if options.HasField("session"):
            # Only an activity routed to a worker session costs these statements.
            session_id, closed = schedule_into(tx, namespace, run_id, queue, options.session, now)
        inserted = tx.one(
            "INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, "
            "due_ms, attempt, fencing_token, seq, activity_type, input, options, lease_ms, "
            "start_to_close_ms, schedule_to_close_deadline_ms, queue_deadline_ms, "
            "created_at_ms, trace_context, rate_limit_key, session_id) "
            "VALUES (?, ?, 'activity', ?, 'queued', ?, ?, 1, 0, "
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            # The queue's limit and the task's rate limit ride on the insert (an eager
            # claim of the new task needs them; _queue_limits, _rate_limits): no
            # statement more.
            f"RETURNING task_id, {outranked_column('tasks')}, "
            "(SELECT l.max_concurrent_activities FROM task_queue_limits l "
            "WHERE l.namespace = tasks.namespace AND l.task_queue = tasks.task_queue) "
            f"AS queue_limit, {rate_limited_column('tasks')}",
            (
                namespace,
                run_id,
                queue,
                now,
                now,
                seq,
                activity_type,
                input.SerializeToString(),
                options.SerializeToString(),
                lease_ms,
                timeouts.start_to_close_ms,
                close_deadline,
                queue_deadline,
                now,
                json.dumps(trace_context) if trace_context else None,
                options.rate_limit_key or None,
                session_id,
            ),
        )
        assert inserted is not None
        if closed is not None:
            # Scheduled into a closed session: it fails at once, as the session's queued
            # activities did when it closed.
            row = tx.one("SELECT * FROM tasks WHERE task_id = ?", (inserted["task_id"],))
            assert row is not None
            fail_for_closed(tx, row, closed, now)
            return
        outranked = bool(inserted["outranked"])
        if fair != (DEFAULT_PRIORITY, None):
            # Only a run with a priority or key set costs this write (_fairness).
            outranked = prioritize(tx, namespace, int(inserted["task_id"]), queue, fair)
        tx.queued_activities[(namespace, run_id, seq)] = {
            "task_id": inserted["task_id"],
            "outranked": outranked,
            "task_queue": queue,
            "rate_limited": inserted["rate_limited"],
            "rate_key": inserted["rate_key"],
            "rate_type": inserted["rate_type"],
            "queue_limit": inserted["queue_limit"],
            "lease_ms": lease_ms,
            "start_to_close_ms": timeouts.start_to_close_ms,
            "schedule_to_close_deadline_ms": close_deadline,
        }
        tx.notes.tasks.add((namespace, queue, "activity"))
        if queue_deadline is not None:
            tx.notes.due.add(queue_deadline)

    def _request_cancel_activity(
        self, tx: Tx, namespace: str, run_id: str, seq: int, now: int
    ) -> None:
        """Workflow code cancelled activity ``seq``: a queued or waiting attempt is
        cancelled at once (ActivityCancelled); a leased one is asked to stop
        (``cancel_requested``, delivered by its heartbeat response) and is cancelled when
        it reports cancellation or its lease expires. An activity that already has an
        outcome keeps it: the request is moot."""
        tx.queued_activities.pop((namespace, run_id, seq), None)
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
