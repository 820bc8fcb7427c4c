"""SQL building blocks shared by the operations (dialect-neutral, see ``_tx``)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import Message

from durable_rpc.errors import (
    InvalidArgumentError,
    LeaseLostError,
    NamespaceNotFoundError,
    NotFoundError,
    WorkflowNotRunningError,
)
from durable_rpc.store._fairness import assign_pass
from durable_rpc.store._logic import INPUT_EVENT_KINDS, lease_lost_message, make_event
from durable_rpc.store._records import LeaseRef, RunInfo
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2

ACTIVE = "('queued', 'leased', 'waiting')"
INPUT_KINDS_SQL = "(" + ", ".join(f"'{kind}'" for kind in INPUT_EVENT_KINDS) + ")"
FENCE = (
    "task_id = ? AND namespace = ? AND kind = ? AND state = 'leased' AND worker_id = ? "
    "AND fencing_token = ? AND expires_at_ms > ?"
)
LIST_LIMIT_MAX = 1000


def require(value: str, what: str) -> None:
    if not value:
        raise InvalidArgumentError(f"{what} must not be empty")


def version_or_default(version: str) -> str:
    return version or "1"


def require_namespace(tx: Tx, namespace: str) -> None:
    if namespace in tx.known_namespaces:
        return
    if tx.one("SELECT name FROM namespaces WHERE name = ?", (namespace,)) is None:
        raise NamespaceNotFoundError(f"namespace {namespace!r} does not exist")
    tx.known_namespaces.add(namespace)


def find_run(
    tx: Tx, namespace: str, workflow_id: str, run_id: str | None, columns: str = ""
) -> Row:
    """The run (``run_id``, else the latest of ``workflow_id``), locked; ``columns``:
    select-list items read with it (e.g. ``_declared_signals.DECLARED_SIGNALS``)."""
    require_namespace(tx, namespace)
    extra = f", {columns}" if columns else ""
    if run_id:
        row = tx.one(
            f"SELECT *{extra} FROM runs WHERE namespace = ? AND run_id = ?{tx.row_lock_suffix}",
            (namespace, run_id),
        )
        if row is None or (workflow_id and row["workflow_id"] != workflow_id):
            raise NotFoundError(f"run {run_id!r} of workflow {workflow_id!r} not found")
        tx.remember_run(row)
        return row
    require(workflow_id, "workflow_id")
    row = tx.one(
        f"SELECT *{extra} FROM runs WHERE namespace = ? AND workflow_id = ? "
        f"ORDER BY id DESC LIMIT 1{tx.row_lock_suffix}",
        (namespace, workflow_id),
    )
    if row is None:
        raise NotFoundError(f"workflow {workflow_id!r} not found")
    tx.remember_run(row)
    return row


def run_info(row: Row) -> RunInfo:
    return RunInfo(
        workflow_id=row["workflow_id"],
        run_id=row["run_id"],
        workflow_type=row["workflow_type"],
        workflow_version=row["workflow_version"],
        task_queue=row["task_queue"],
        status=row["status"],
        start_time_ms=row["start_time_ms"],
        close_time_ms=row["close_time_ms"],
        history_length=row["history_length"],
        history_size_bytes=row["history_size_bytes"],
    )


def blob(value: object) -> bytes | None:
    if value is None:
        return None
    assert isinstance(value, bytes | bytearray | memoryview)
    return bytes(value)


def append_event(
    tx: Tx, namespace: str, run_id: str, now: int, kind: str, attributes: Message
) -> int:
    """Appends one event (event_id = history_length + 1); returns its event id. The row is
    written with the transaction's other appends to the run (``Tx.flush_events``)."""
    event_id = tx.next_event_id(namespace, run_id)
    tx.add_event(
        namespace, run_id, event_id, kind, now, make_event(event_id, now, kind, attributes)
    )
    return event_id


def decision_input(
    tx: Tx, namespace: str, run_id: str, now: int, kind: str, attributes: Message
) -> None:
    """An input event a command of the decision being recorded caused in its own run:
    appended once all the decision's command events are (``append_decision_inputs``)."""

    def append() -> None:
        append_event(tx, namespace, run_id, now, kind, attributes)

    tx.decision_inputs.append(append)


def append_decision_inputs(tx: Tx, closed: bool) -> None:
    """Appends the decision's input events, or drops them when it closed the run (no
    later task will see them; its children and signalled runs are not affected)."""
    inputs, tx.decision_inputs = tx.decision_inputs, []
    if not closed:
        for append in inputs:
            append()


def saw_new_input(tx: Tx, namespace: str, run_id: str, last_seen_event_id: int) -> bool:
    """Whether a workflow task that saw history up to ``last_seen_event_id`` saw an input
    event the previous WorkflowTaskCompleted marker had not (so its marker is needed to
    replay the activation boundary)."""
    previous = tx.one(
        "SELECT data FROM history WHERE namespace = ? AND run_id = ? "
        "AND kind = 'workflow_task_completed' ORDER BY event_id DESC LIMIT 1",
        (namespace, run_id),
    )
    seen = 0
    if previous is not None:
        event = history_pb2.HistoryEvent.FromString(bytes(previous["data"]))
        seen = event.workflow_task_completed.last_seen_event_id
    row = tx.one(
        "SELECT event_id FROM history WHERE namespace = ? AND run_id = ? "
        f"AND event_id > ? AND event_id <= ? AND kind IN {INPUT_KINDS_SQL} LIMIT 1",
        (namespace, run_id, seen, last_seen_event_id),
    )
    return row is not None


def has_active_workflow_task(tx: Tx, namespace: str, run_id: str) -> bool:
    """Whether the run has a workflow task queued, leased or waiting (a retry backoff)."""
    row = tx.one(
        "SELECT 1 AS present FROM tasks WHERE namespace = ? AND run_id = ? "
        f"AND kind = 'workflow' AND state IN {ACTIVE} LIMIT 1",
        (namespace, run_id),
    )
    return row is not None


def ensure_workflow_task(tx: Tx, namespace: str, run_id: str, task_queue: str, now: int) -> None:
    """Queues a workflow task unless the run already has one queued, leased or waiting."""
    # The task carries the run's definition and build pin ('' -- decided unversioned --
    # is no pin): claims filter on them (SERVED_BY_WORKER); and its priority and fairness
    # key, which order the claims (``_fairness``).
    inserted = tx.one(
        "INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, due_ms, "
        "attempt, fencing_token, created_at_ms, workflow_type, workflow_version, build_id, "
        "priority, fairness_key) "
        "SELECT ?, ?, 'workflow', ?, 'queued', ?, ?, 1, 0, ?, r.workflow_type, "
        "r.workflow_version, NULLIF(r.build_id, ''), r.priority, r.fairness_key FROM runs r "
        # A run not yet admitted (``_admission``) gets its first task when admitted.
        "WHERE r.namespace = ? AND r.run_id = ? AND r.admission IS NULL "
        "AND NOT EXISTS (SELECT 1 FROM tasks WHERE namespace = ? AND run_id = ? "
        f"AND kind = 'workflow' AND state IN {ACTIVE}) ON CONFLICT DO NOTHING "
        "RETURNING task_id, priority, fairness_key",
        (namespace, run_id, task_queue, now, now, now, namespace, run_id, namespace, run_id),
    )
    if inserted is not None:
        if inserted["fairness_key"] is not None:
            key = inserted["fairness_key"]
            fair_pass = assign_pass(
                tx, namespace, task_queue, "workflow", inserted["priority"], key
            )
            tx.run(
                "UPDATE tasks SET fairness_pass = ? WHERE task_id = ?",
                (fair_pass, inserted["task_id"]),
            )
        tx.notes.tasks.add((namespace, task_queue, "workflow"))


#: ParentClosePolicy values (StartChildWorkflow.parent_close_policy).
PARENT_CLOSE_POLICIES = frozenset({"TERMINATE", "REQUEST_CANCEL", "ABANDON"})

#: runs.timeout_kind of a run whose earliest deadline is its cleanup deadline: the due
#: pass terminates it (reason CLEANUP_DEADLINE_EXCEEDED) instead of timing it out.
CLEANUP_TIMEOUT_KIND = "cleanup"


def request_cancel_run(
    tx: Tx,
    namespace: str,
    run: Row,
    reason: str,
    now: int,
    cleanup_timeout_ms: int | None = None,
) -> None:
    """Appends CancelRequested to an open run (once: a second request changes nothing,
    its cleanup deadline included).

    The run's activities are not told to stop here: workflow code cancels what it
    awaited by each call's cancellation policy (a RequestCancelActivity command), and
    what it runs inside ``workflow.shield()`` keeps running (the event's ``cooperative``).
    A cleanup timeout becomes the run's deadline when it is the earliest one, marked
    ``timeout_kind = 'cleanup'``, so the due pass that closes timed-out runs finds it
    through the same index."""
    if run["cancel_requested"]:
        return
    event = history_pb2.CancelRequested(reason=reason, cooperative=True)
    if cleanup_timeout_ms is None:
        tx.run(
            "UPDATE runs SET cancel_requested = 1 WHERE namespace = ? AND run_id = ?",
            (namespace, run["run_id"]),
        )
    else:
        deadline = now + cleanup_timeout_ms
        event.cleanup_deadline.FromMilliseconds(deadline)
        tx.run(
            "UPDATE runs SET cancel_requested = 1, "
            "timeout_kind = CASE WHEN deadline_ms IS NULL OR deadline_ms > ? "
            "THEN ? ELSE timeout_kind END, "
            "deadline_ms = CASE WHEN deadline_ms IS NULL OR deadline_ms > ? "
            "THEN ? ELSE deadline_ms END "
            "WHERE namespace = ? AND run_id = ?",
            (deadline, CLEANUP_TIMEOUT_KIND, deadline, deadline, namespace, run["run_id"]),
        )
        tx.notes.due.add(deadline)
    append_event(tx, namespace, run["run_id"], now, "cancel_requested", event)
    ensure_workflow_task(tx, namespace, run["run_id"], run["task_queue"], now)


def open_run(tx: Tx, namespace: str, run_id: str) -> Row:
    run = tx.one(
        f"SELECT * FROM runs WHERE namespace = ? AND run_id = ?{tx.row_lock_suffix}",
        (namespace, run_id),
    )
    if run is None:
        raise NotFoundError(f"run {run_id!r} not found")
    if run["status"] != "running":
        raise WorkflowNotRunningError(f"run {run_id!r} is {run['status']}")
    tx.remember_run(run)
    return run


# A holder's write that comes after its lease expired (a server outage, a paused worker)
# still counts while nobody else has claimed the task since -- a claim raises the token,
# so the token is still the latest -- and nothing has ended the attempt: the lease is
# either still `leased` (the expiry pass has not run yet) or the expiry pass only put the
# task back for a retry with the same token (`outcome_kind = 'expired'`). An expiry that
# recorded a final outcome (ambiguous non-idempotent attempt, attempts exhausted,
# cancelled) left the task `failed`/`cancelled`: not revived, so that report is LEASE_LOST.
# Reviving puts the lease back as the claim left it (the retry's attempt number undone)
# with an expiry just past `now`, so the caller's write then goes through the ordinary
# fence and sets the expiry, state and outcome it always sets.
_REVIVE = (
    "UPDATE tasks SET state = 'leased', "
    "attempt = CASE WHEN state = 'leased' THEN attempt ELSE attempt - 1 END, "
    "expires_at_ms = ?, due_ms = ?, queue_deadline_ms = NULL, "
    "outcome_token = NULL, outcome_kind = NULL "
    "WHERE task_id = ? AND namespace = ? AND kind = ? AND worker_id = ? "
    "AND fencing_token = ? AND (state = 'leased' OR (state IN ('queued', 'waiting') "
    "AND outcome_kind = 'expired' AND outcome_token = fencing_token)) "
    "RETURNING run_id, attempt"
)


def fenced_update(
    tx: Tx,
    namespace: str,
    lease: LeaseRef,
    kind: str,
    now: int,
    assignments: str,
    params: Sequence[object] = (),
    returning: str = "*",
) -> Row | None:
    """The conditional write of the lease protocol: applies ``assignments`` only if the
    caller still owns the leased task with this token and the lease has not expired --
    or it expired but the lease can be revived (see ``_REVIVE``). Returns the task row
    (``returning``: the RETURNING list, the whole row by default)."""
    fence = (lease.task_id, namespace, kind, lease.worker_id, lease.fencing_token)
    row = tx.one(
        f"UPDATE tasks SET {assignments} WHERE {FENCE} RETURNING {returning}",
        (*params, *fence, now),
    )
    if row is not None:
        return row
    # Only a miss pays for the revival: the live lease above is the hot path.
    revived = tx.one(_REVIVE, (now + 1, now + 1, *fence))
    if revived is None:
        return None
    if kind == "workflow":
        # The expiry pass counted a next attempt on the run too (describe shows it).
        tx.run(
            "UPDATE runs SET wft_attempt = ? WHERE namespace = ? AND run_id = ?",
            (revived["attempt"], namespace, revived["run_id"]),
        )
    row = tx.one(
        f"UPDATE tasks SET {assignments} WHERE {FENCE} RETURNING {returning}",
        (*params, *fence, now),
    )
    if row is not None and row["due_ms"] is not None:
        # The expiry pass already consumed this task's due time: announce the new one.
        tx.notes.due.add(row["due_ms"])
    return row


def record_outcome(
    tx: Tx,
    namespace: str,
    lease: LeaseRef,
    kind: str,
    now: int,
    outcome: str,
    assignments: str,
    params: Sequence[object] = (),
    returning: str = "*",
) -> Row | None:
    """Records the leased task's ``outcome`` under its fence: ``assignments`` plus the
    outcome columns that recognise a duplicate report. Returns the task row; None when
    this very lease already recorded that outcome (an idempotent repeat: nothing to do).
    Raises as ``lease_miss`` does otherwise."""
    task = fenced_update(
        tx,
        namespace,
        lease,
        kind,
        now,
        f"{assignments}, outcome_token = fencing_token, outcome_kind = '{outcome}'",
        params,
        returning,
    )
    if task is None:
        lease_miss(tx, namespace, lease, kind, outcome)
    return task


def lease_miss(tx: Tx, namespace: str, lease: LeaseRef, kind: str, outcome: str) -> None:
    """The fenced write matched nothing: succeed for a duplicate of the outcome this very
    lease recorded, else raise (and the caller's savepoint discards any change)."""
    row = tx.one(
        "SELECT state, worker_id, fencing_token, outcome_token, outcome_kind FROM tasks "
        "WHERE task_id = ? AND namespace = ? AND kind = ?",
        (lease.task_id, namespace, kind),
    )
    if row is not None and row["worker_id"] == lease.worker_id:
        if row["outcome_token"] == lease.fencing_token and row["outcome_kind"] == outcome:
            return
        if row["state"] == "cancelled" and row["fencing_token"] == lease.fencing_token:
            raise WorkflowNotRunningError(
                f"task {lease.task_id} was cancelled because its workflow run closed"
            )
    raise LeaseLostError(lease_lost_message(lease.task_id, lease.worker_id, lease.fencing_token))
