"""Describe's "why is it stuck": one plain sentence for an open run that makes no progress.

Read from the run's open task rows (its workflow task, activity attempts, timers) and its
open children, inside describe's snapshot; every time is the database clock's. The first
that applies, in this order:

0. not yet admitted by its namespace's admission policy (``_admission``): the limit
   that holds it and how many earlier starts wait before it;
1. its workflow task failing (the last error, the attempt, when the next one is due);
2. its workflow task leased by worker W until T;
3. its workflow task claimable but no live worker registers its definition (the existing
   ``definition_unavailable_reason``); claimable and served: progress, no sentence;
4. no workflow task (the run waits on something outside it): a budget reservation
   waiting (``_budgets``: the budget, the amount of its capacity, what is held); an
   activity queued with a live worker that serves it is progress (no sentence; for one
   in a worker session, the worker must also be one that may enter it); else the first
   open activity by seq: leased by worker W until T, in backoff until T after N attempts
   (the last error), queued in a session no live worker may enter (``_session_waits``:
   who holds it, or what a worker needs), or queued with no live worker registering it;
   then the earliest timer; then an open child run; then a read of a message stream
   waiting for an item (``_streams``); else a signal or a condition.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from durable_rpc.store._admission import deferred_reason
from durable_rpc.store._budgets import waiting_reason as budget_waiting_reason
from durable_rpc.store._liveness import LIVE_WORKER, live_since
from durable_rpc.store._ops_leases import definition_unavailable_reason
from durable_rpc.store._options import StoreOptions
from durable_rpc.store._session_waits import waiting_reason as session_waiting_reason
from durable_rpc.store._shared import ACTIVE
from durable_rpc.store._streams import waiting_reason as stream_waiting_reason
from durable_rpc.store._time_text import db_time_text
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import payload_pb2

#: A failure's message is cut to its first line and this many characters.
_MESSAGE_CHARS = 200


def stuck_reason(
    tx: Tx, options: StoreOptions, namespace: str, run: Row, definition_available: bool
) -> str:
    """The sentence for ``run`` (a ``runs`` row), '' when closed or making progress."""
    if run["status"] != "running":
        return ""
    if run["admission"] is not None:
        return deferred_reason(tx, namespace, run)
    now = tx.now_ms()
    run_id = run["run_id"]
    task = tx.one(
        "SELECT state, due_ms, expires_at_ms, worker_id, attempt FROM tasks "
        f"WHERE namespace = ? AND run_id = ? AND kind = 'workflow' AND state IN {ACTIVE} "
        "LIMIT 1",
        (namespace, run_id),
    )
    if task is not None:
        return _workflow_task(run, task, now, definition_available)
    budget = budget_waiting_reason(tx, namespace, run_id)
    if budget:
        return budget
    activities = tx.all(
        "SELECT seq, activity_type, task_queue, state, attempt, due_ms, expires_at_ms, "
        "worker_id, last_failure, session_id FROM tasks WHERE namespace = ? AND run_id = ? "
        f"AND kind = 'activity' AND state IN {ACTIVE} ORDER BY seq",
        (namespace, run_id),
    )
    if activities:
        return _activities(tx, options, namespace, activities, now)
    timer = tx.one(
        "SELECT MIN(due_ms) AS due, COUNT(*) AS timers FROM tasks WHERE namespace = ? "
        "AND run_id = ? AND kind = 'timer' AND state = 'waiting'",
        (namespace, run_id),
    )
    if timer is not None and timer["due"] is not None:
        more = int(timer["timers"]) - 1
        also = f" (the earliest of {more + 1} timers)" if more else ""
        return f"Waiting on a timer until {db_time_text(timer['due'])}{also}."
    child = tx.one(
        "SELECT workflow_id, workflow_type FROM runs WHERE namespace = ? "
        "AND parent_run_id = ? AND status = 'running' ORDER BY id LIMIT 1",
        (namespace, run_id),
    )
    if child is not None:
        return (
            f"Waiting for child workflow {child['workflow_id']!r} "
            f"({child['workflow_type']}) to close."
        )
    stream = stream_waiting_reason(tx, namespace, run_id)
    if stream:
        return stream
    return (
        "Waiting for a signal or a condition: no workflow task, activity, timer or child "
        "is pending, so only new input (a signal, an update, a cancellation) moves it."
    )


def _workflow_task(run: Row, task: Row, now: int, definition_available: bool) -> str:
    leased = task["state"] == "leased" and task["expires_at_ms"] > now
    failure = run["last_wft_failure"]
    if failure is not None:
        # Cleared by the next successful workflow task: set, the run is retrying one.
        # The task's attempt is the next one (a failure or an expired lease raised it).
        failed = max(1, task["attempt"] - 1)
        if leased:
            then = (
                f"attempt {task['attempt']} is leased by worker {task['worker_id']!r} "
                f"until {db_time_text(task['expires_at_ms'])}"
            )
        elif task["due_ms"] is not None and task["due_ms"] > now:
            then = f"attempt {task['attempt']} is due at {db_time_text(task['due_ms'])}"
        else:
            then = f"attempt {task['attempt']} is queued"
        return (
            f"Its workflow task is failing: attempt {failed} failed with "
            f"{_failure_line(failure)}; {then}."
        )
    if leased:
        return (
            f"Its workflow task (attempt {task['attempt']}) is leased by worker "
            f"{task['worker_id']!r} until {db_time_text(task['expires_at_ms'])}: no other worker "
            "takes it before then."
        )
    if not definition_available:
        return definition_unavailable_reason(run)
    return ""  # claimable, and a live worker of its queue serves it: progress


def _activities(
    tx: Tx, options: StoreOptions, namespace: str, activities: list[Row], now: int
) -> str:
    queued = [a for a in activities if _claimable(a, now)]
    servers = _live_servers(tx, options, namespace, queued)

    def session_wait(activity: Row) -> str:
        workers = servers.get((activity["task_queue"], activity["activity_type"]), set())
        return session_waiting_reason(tx, namespace, activity, workers, now)

    for activity in queued:
        if (activity["task_queue"], activity["activity_type"]) not in servers:
            continue
        if activity["session_id"] is None or not session_wait(activity):
            return ""  # a live worker will claim it: progress
    first = activities[0]
    name = f"activity {first['activity_type']!r} (seq {first['seq']})"
    if first["session_id"] is not None and _claimable(first, now):
        waits = session_wait(first)
        if waits:
            return f"Waiting for {name}: {waits}"
    if first["state"] == "leased":
        expiry = first["expires_at_ms"]
        until = "until" if expiry > now else "whose lease expired at"
        return (
            f"Waiting for {name}: attempt {first['attempt']} is leased by worker "
            f"{first['worker_id']!r} {until} {db_time_text(expiry)}."
        )
    if not _claimable(first, now):
        failed = first["attempt"] - 1
        attempts = "1 attempt" if failed == 1 else f"{failed} attempts"
        last = (
            f" (last error: {_failure_line(first['last_failure'])})"
            if first["last_failure"] is not None
            else ""
        )
        until = db_time_text(first["due_ms"])
        return f"Waiting for {name}: in backoff until {until} after {attempts}{last}."
    return (
        f"Waiting for {name}: it is queued on task queue {first['task_queue']!r}, but no live "
        "worker there registers that activity: start a worker that does."
    )


def _claimable(activity: Row, now: int) -> bool:
    return bool(
        activity["state"] in ("queued", "waiting")
        and activity["due_ms"] is not None
        and activity["due_ms"] <= now
    )


def _live_servers(
    tx: Tx, options: StoreOptions, namespace: str, queued: list[Row]
) -> dict[tuple[str, str], set[str]]:
    """(task queue, activity type) of ``queued`` -> the live workers there registering it."""
    if not queued:
        return {}
    types = sorted({a["activity_type"] for a in queued})
    marks = ", ".join("?" for _ in types)
    rows = tx.all(
        "SELECT DISTINCT w.task_queue, wa.activity_type, w.worker_id FROM worker_activities wa "
        "JOIN workers w ON w.namespace = wa.namespace AND w.worker_id = wa.worker_id "
        f"WHERE wa.namespace = ? AND wa.activity_type IN ({marks}) AND {LIVE_WORKER}",
        (namespace, *types, live_since(tx, options)),
    )
    servers: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        servers.setdefault((row["task_queue"], row["activity_type"]), set()).add(row["worker_id"])
    return servers


def _failure_line(data: object) -> str:
    """``Type: message`` of a stored Failure, its message cut to one short line."""
    failure = payload_pb2.Failure()
    try:
        failure.ParseFromString(bytes(data))  # type: ignore[call-overload]
    except (DecodeError, TypeError):
        return "an unreadable failure"
    lines = failure.message.strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > _MESSAGE_CHARS or len(lines) > 1:
        message = message[:_MESSAGE_CHARS].rstrip() + "..."
    return f"{failure.type or 'Error'}: {message}" if message else failure.type or "Error"
