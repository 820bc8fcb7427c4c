"""Closing a run: its tasks cancelled, its outcome noted, its parent told, the
parent-close policy applied to its open children, its budget reservations released and
its room in the namespace's admission given to the next waiting run.

A failed child run's next attempt (``_child_retry``) starts runs, which may close
others (admission's CANCEL_OLDEST): it is handed in by the caller (``ChildRetry``), so
this module stays below run creation (``_runs``)."""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf.message import Message

from durable_rpc.store._admission import ADMISSION_PROBE, admit_waiting
from durable_rpc.store._budgets import release_run
from durable_rpc.store._records import RunOutcome
from durable_rpc.store._shared import (
    ACTIVE,
    append_event,
    ensure_workflow_task,
    request_cancel_run,
)
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import history_pb2, payload_pb2

#: Starts the next attempt of a child run that just closed as failed when its retry
#: policy allows one; returns whether it did (``_child_retry.retry_child_run``).
ChildRetry = Callable[[Tx, str, str, bytes | None, int], bool]

CLEANUP_DEADLINE_EXCEEDED = "CLEANUP_DEADLINE_EXCEEDED"


def close_run(
    tx: Tx,
    namespace: str,
    run_id: str,
    status: str,
    now: int,
    result: bytes | None = None,
    failure: bytes | None = None,
    retry_child: ChildRetry | None = None,
) -> None:
    """Closes the run and cancels its queued, leased and waiting tasks.

    A child run tells its parent (a ChildWorkflow* input event and a workflow task, unless
    it continued-as-new: the new run is still the same child); a parent applies the
    parent-close policy of each open child. ``retry_child``: given by a close as failed
    (a FailWorkflow decision), after which a child's retry policy may start its next
    attempt instead of telling the parent."""
    # Whether the run has open children comes back with the update (the run row is
    # locked by it, so no child of this run can start meanwhile).
    closed = tx.one(
        "UPDATE runs SET status = ?, close_time_ms = ?, result = ?, failure = ?, "
        "deadline_ms = NULL, pending_updates = 0, admission = NULL "
        "WHERE namespace = ? AND run_id = ? "
        "RETURNING parent_run_id, parent_seq, pending_updates, "
        "EXISTS (SELECT 1 FROM runs AS child "
        "WHERE child.namespace = runs.namespace AND child.parent_run_id = runs.run_id "
        f"AND child.status = 'running') AS open_children, {ADMISSION_PROBE}, "
        # Whether it holds or waits for a budget: one index probe in the same statement,
        # so a run that never reserved costs no statement more (store/_budgets).
        "EXISTS (SELECT 1 FROM budget_reservations AS b "
        "WHERE b.namespace = runs.namespace AND b.run_id = runs.run_id) AS reserved",
        (status, now, result, failure, namespace, run_id),
    )
    if closed is not None and closed["reserved"]:
        release_run(tx, namespace, run_id, now)
    tx.run(
        "UPDATE tasks SET state = 'cancelled', due_ms = NULL, queue_deadline_ms = NULL, "
        f"cancel_requested = 1 WHERE namespace = ? AND run_id = ? AND state IN {ACTIVE}",
        (namespace, run_id),
    )
    if closed is not None and closed["pending_updates"]:
        # Requests no task of this run can deliver any more (their callers see it closed).
        tx.run(
            "DELETE FROM update_requests WHERE namespace = ? AND run_id = ? AND state = 'pending'",
            (namespace, run_id),
        )
    tx.notes.closed.append((namespace, run_id))
    if status != "continued_as_new":  # its outcome names the next run: read it instead
        tx.notes.outcomes[(namespace, run_id)] = RunOutcome(run_id, status, result, failure)
    if (
        closed is not None
        and closed["parent_run_id"]
        and status != "continued_as_new"
        and not (
            status == "failed"
            and retry_child is not None
            and retry_child(tx, namespace, run_id, failure, now)
        )
    ):
        _notify_parent(
            tx,
            namespace,
            closed["parent_run_id"],
            closed["parent_seq"],
            run_id,
            status,
            now,
            result,
            failure,
        )
    if closed is None or closed["open_children"]:
        _apply_parent_close_policy(tx, namespace, run_id, now)
    if closed is not None and closed["admission_on"] and status != "continued_as_new":
        # The room this run held goes to the next waiting run, in this transaction (a
        # continue-as-new's successor keeps it).
        admit_waiting(tx, namespace)


_CHILD_CLOSE_EVENTS: dict[str, tuple[str, type[Message]]] = {
    "failed": ("child_workflow_failed", history_pb2.ChildWorkflowFailed),
    "cancelled": ("child_workflow_cancelled", history_pb2.ChildWorkflowCancelled),
    "terminated": ("child_workflow_terminated", history_pb2.ChildWorkflowTerminated),
    "timed_out": ("child_workflow_timed_out", history_pb2.ChildWorkflowTimedOut),
}


def _notify_parent(
    tx: Tx,
    namespace: str,
    parent_run_id: str,
    seq: int,
    run_id: str,
    status: str,
    now: int,
    result: bytes | None,
    failure: bytes | None,
) -> None:
    parent = tx.one(
        "SELECT task_queue, status FROM runs WHERE namespace = ? AND run_id = ?"
        f"{tx.row_lock_suffix}",
        (namespace, parent_run_id),
    )
    if parent is None or parent["status"] != "running":
        return
    event: Message
    if status == "completed":
        kind = "child_workflow_completed"
        event = history_pb2.ChildWorkflowCompleted(seq=seq, run_id=run_id)
        if result:
            event.result.MergeFromString(result)
    else:
        kind, message_type = _CHILD_CLOSE_EVENTS.get(status, _CHILD_CLOSE_EVENTS["failed"])
        event = message_type(seq=seq, run_id=run_id)
        if failure:
            event.failure.MergeFromString(failure)  # type: ignore[attr-defined]
    append_event(tx, namespace, parent_run_id, now, kind, event)
    ensure_workflow_task(tx, namespace, parent_run_id, parent["task_queue"], now)


def _apply_parent_close_policy(tx: Tx, namespace: str, run_id: str, now: int) -> None:
    children = tx.all(
        "SELECT * FROM runs WHERE namespace = ? AND parent_run_id = ? AND status = 'running' "
        "AND parent_close_policy != 'ABANDON' ORDER BY id",
        (namespace, run_id),
    )
    for child in children:
        if child["parent_close_policy"] == "REQUEST_CANCEL":
            request_cancel_run(tx, namespace, child, "parent closed", now)
            continue
        append_event(
            tx,
            namespace,
            child["run_id"],
            now,
            "workflow_terminated",
            history_pb2.WorkflowTerminated(reason="parent closed"),
        )
        failure = payload_pb2.Failure(
            message="parent closed", type="WorkflowTerminatedError"
        ).SerializeToString()
        close_run(tx, namespace, child["run_id"], "terminated", now, failure=failure)


def terminate_after_cleanup(tx: Tx, namespace: str, run_id: str, now: int) -> None:
    """The run's cleanup deadline passed while it was still open (the due pass, in its
    transaction, the run's deadline already cleared by a fenced update): terminated."""
    # The event's reason is the stable code alone; the failure (describe, result())
    # starts with it and names it as its cause's type, for code that matches on types.
    append_event(
        tx,
        namespace,
        run_id,
        now,
        "workflow_terminated",
        history_pb2.WorkflowTerminated(reason=CLEANUP_DEADLINE_EXCEEDED),
    )
    message = f"{CLEANUP_DEADLINE_EXCEEDED}: the run was still open at its cleanup deadline"
    failure = payload_pb2.Failure(
        message=message,
        type="WorkflowTerminatedError",
        cause=payload_pb2.Failure(message=message, type=CLEANUP_DEADLINE_EXCEEDED),
    )
    close_run(tx, namespace, run_id, "terminated", now, failure=failure.SerializeToString())
