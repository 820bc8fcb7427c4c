"""Worker sessions (resource affinity): the rows, the checks and the transitions that the
claim, heartbeat, retry and due paths apply inside their own transactions.

A session row (``worker_sessions``) is keyed by (namespace, session_id). The first
activity scheduled into it creates it ``pending`` (its options are the ones it keeps);
the first claim by a worker that registered sessions (``worker_session_config``) with
capabilities meeting ``requires`` and a free slot makes that worker the holder
(``active``, generation + 1, the lease and, the first time only, the TTL deadline counted
from that database time). ``lost`` is not stored: an ``active`` row whose lease lapsed.
A claim by another qualifying worker then takes it over (same TTL deadline). ``closed``
is final; its queued activities fail with :data:`SESSION_CLOSED_ERROR`.

Only an activity task carrying a ``session_id`` pays for any of this: the claim of a
worker that registered no sessions adds ``session_id IS NULL`` to its candidate SELECT.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from durable_rpc.store._dialects import Dialect
from durable_rpc.store._session_records import WorkerSessionRecord
from durable_rpc.store._shared import append_event, blob, ensure_workflow_task
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2, options_pb2, payload_pb2

#: The failure type of an activity whose session closed before it could run.
SESSION_CLOSED_ERROR = "SessionClosed"
#: Close reasons the engine gives (an explicit close names its own).
TTL_EXPIRED = "ttl_expired"
WORKER_SHUTDOWN = "worker_shutdown"
#: The prefix of a run's own session (SessionOptions.session_id empty).
RUN_SESSION_PREFIX = "run:"


def session_tables(d: Dialect) -> tuple[str, ...]:
    """Migration 25 (same shape on both backends)."""
    return (
        f"""CREATE TABLE worker_sessions (
            namespace TEXT NOT NULL,
            session_id TEXT NOT NULL,
            -- The run of a run's own session ("run:" + its id; retention deletes it with
            -- the run); NULL: a named session, shared by any run that names it.
            run_id TEXT,
            task_queue TEXT NOT NULL,
            options {d.blob} NOT NULL,
            requires TEXT NOT NULL,
            lease_ms {d.bigint} NOT NULL CHECK (lease_ms > 0),
            ttl_ms {d.bigint} NOT NULL CHECK (ttl_ms >= lease_ms),
            max_activities {d.bigint} NOT NULL CHECK (max_activities >= 0),
            state TEXT NOT NULL CHECK (state IN ('pending', 'active', 'closed')),
            holder TEXT,
            generation {d.bigint} NOT NULL DEFAULT 0,
            lease_expires_ms {d.bigint},
            ttl_deadline_ms {d.bigint},
            reacquisitions {d.bigint} NOT NULL DEFAULT 0,
            created_at_ms {d.bigint} NOT NULL,
            close_reason TEXT,
            PRIMARY KEY (namespace, session_id)
        )""",
        "CREATE INDEX worker_sessions_run ON worker_sessions (namespace, run_id)",
        # The due pass's TTL scan and a claim's look at the queue's open sessions.
        "CREATE INDEX worker_sessions_ttl ON worker_sessions (ttl_deadline_ms) "
        "WHERE state <> 'closed'",
        "CREATE INDEX worker_sessions_queue ON worker_sessions (namespace, task_queue) "
        "WHERE state <> 'closed'",
        """CREATE TABLE worker_session_config (
            namespace TEXT NOT NULL,
            worker_id TEXT NOT NULL,
            capabilities TEXT NOT NULL,
            max_sessions INTEGER NOT NULL CHECK (max_sessions > 0),
            PRIMARY KEY (namespace, worker_id)
        )""",
        # The session an activity task runs in (NULL: none, the common case).
        "ALTER TABLE tasks ADD COLUMN session_id TEXT",
        "CREATE INDEX tasks_session ON tasks (namespace, session_id) WHERE session_id IS NOT NULL",
    )


def session_id_of(options: options_pb2.SessionOptions, run_id: str) -> str:
    return options.session_id or RUN_SESSION_PREFIX + run_id


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """What a worker registered: its capabilities and its bound on held sessions."""

    capabilities: dict[str, str]
    max_sessions: int


def worker_config(tx: Tx, namespace: str, worker_id: str) -> SessionConfig | None:
    row = tx.one(
        "SELECT capabilities, max_sessions FROM worker_session_config "
        "WHERE namespace = ? AND worker_id = ?",
        (namespace, worker_id),
    )
    if row is None:
        return None
    return SessionConfig(json.loads(row["capabilities"]), int(row["max_sessions"]))


def meets(config: SessionConfig, requires: dict[str, str]) -> bool:
    return all(config.capabilities.get(k) == v for k, v in requires.items())


def is_live(row: Row, now: int) -> bool:
    """Whether an ``active`` row's holder still has authority (lease and TTL ahead)."""
    return (
        row["state"] == "active"
        and row["lease_expires_ms"] is not None
        and row["lease_expires_ms"] > now
        and row["ttl_deadline_ms"] > now
    )


def held_count(tx: Tx, namespace: str, worker_id: str, now: int) -> int:
    """The live sessions ``worker_id`` holds (what max_concurrent_worker_sessions bounds)."""
    return int(
        tx.value(
            "SELECT COUNT(*) AS n FROM worker_sessions WHERE namespace = ? AND holder = ? "
            "AND state = 'active' AND lease_expires_ms > ? AND ttl_deadline_ms > ?",
            (namespace, worker_id, now, now),
        )
        or 0
    )


def running_count(tx: Tx, namespace: str, session_id: str, now: int) -> int:
    return int(
        tx.value(
            "SELECT COUNT(*) AS n FROM tasks WHERE namespace = ? AND session_id = ? "
            "AND kind = 'activity' AND state = 'leased' AND expires_at_ms > ?",
            (namespace, session_id, now),
        )
        or 0
    )


def may_enter(tx: Tx, row: Row, worker_id: str, config: SessionConfig, now: int) -> bool:
    """Whether ``worker_id`` may claim an activity of session ``row`` now: as its live
    holder under the session's concurrency bound, or as its first or next holder (pending,
    or the holder lost) with the capabilities and a free slot."""
    if row["state"] == "closed" or (
        row["ttl_deadline_ms"] is not None and row["ttl_deadline_ms"] <= now
    ):
        return False
    if is_live(row, now) and row["holder"] != worker_id:
        return False
    if not meets(config, json.loads(row["requires"])):
        return False
    entering = not (is_live(row, now) and row["holder"] == worker_id)
    if entering and held_count(tx, row["namespace"], worker_id, now) >= config.max_sessions:
        return False
    limit = int(row["max_activities"])
    return not limit or running_count(tx, row["namespace"], row["session_id"], now) < limit


def claimable_sessions(
    tx: Tx, namespace: str, task_queue: str, worker_id: str, config: SessionConfig, now: int
) -> list[str]:
    """The open sessions of the queue whose activities ``worker_id`` may claim now."""
    rows = tx.all(
        "SELECT * FROM worker_sessions WHERE namespace = ? AND task_queue = ? "
        "AND state <> 'closed'",
        (namespace, task_queue),
    )
    return [r["session_id"] for r in rows if may_enter(tx, r, worker_id, config, now)]


def enter(tx: Tx, namespace: str, session_id: str, worker_id: str, now: int) -> Row | None:
    """Makes ``worker_id`` the session's holder (or renews its lease) for a claim of one
    of its activities; None when it may not (another claim got there first: the row is
    locked and checked again, so two replicas never both become its holder or both take
    the last concurrency slot)."""
    config = worker_config(tx, namespace, worker_id)
    row = tx.one(
        f"SELECT * FROM worker_sessions WHERE namespace = ? AND session_id = ?{tx.row_lock_suffix}",
        (namespace, session_id),
    )
    if config is None or row is None or not may_enter(tx, row, worker_id, config, now):
        return None
    if is_live(row, now) and row["holder"] == worker_id:
        return tx.one(
            "UPDATE worker_sessions SET lease_expires_ms = CASE WHEN ttl_deadline_ms < ? + "
            "lease_ms THEN ttl_deadline_ms ELSE ? + lease_ms END "
            "WHERE namespace = ? AND session_id = ? RETURNING *",
            (now, now, namespace, session_id),
        )
    return take(tx, row, worker_id, now)


def take(tx: Tx, row: Row, worker_id: str, now: int) -> Row | None:
    """Hands the session ``row`` (pending, or its holder lost) to ``worker_id``: the next
    generation; the TTL deadline set the first time only (a new holder keeps it). A lost
    holder that nobody replaced gets it back as it was (same generation: its handle and
    the generation it noted stay valid), as a late lease report is still accepted."""
    same = row["holder"] == worker_id
    reacquired = 1 if row["holder"] is not None and not same else 0
    taken = tx.one(
        "UPDATE worker_sessions SET state = 'active', holder = ?, generation = generation + ?, "
        "reacquisitions = reacquisitions + ?, "
        "ttl_deadline_ms = COALESCE(ttl_deadline_ms, ? + ttl_ms), "
        "lease_expires_ms = CASE WHEN COALESCE(ttl_deadline_ms, ? + ttl_ms) < ? + lease_ms "
        "THEN COALESCE(ttl_deadline_ms, ? + ttl_ms) ELSE ? + lease_ms END "
        "WHERE namespace = ? AND session_id = ? AND generation = ? RETURNING *",
        (
            worker_id,
            0 if same else 1,
            reacquired,
            now,
            now,
            now,
            now,
            now,
            row["namespace"],
            row["session_id"],
            row["generation"],
        ),
    )
    if taken is not None:
        # The due pass closes it at its TTL deadline.
        tx.notes.due.add(int(taken["ttl_deadline_ms"]))
    return taken


def renew_for(
    tx: Tx, namespace: str, session_id: str, worker_id: str, now: int
) -> WorkerSessionRecord | None:
    """An activity heartbeat of the session's holder renews its lease (never past the
    TTL). A holder whose lease lapsed while nobody took the session over gets it back,
    as a lease's late report does (DESIGN, the lease protocol). The renewed session, for
    the worker's locally observed deadline; None when it was not renewed (closed, past
    its TTL, held by another worker)."""
    row = tx.one(
        "UPDATE worker_sessions SET lease_expires_ms = CASE WHEN ttl_deadline_ms < ? + "
        "lease_ms THEN ttl_deadline_ms ELSE ? + lease_ms END "
        "WHERE namespace = ? AND session_id = ? AND holder = ? AND state = 'active' "
        "AND ttl_deadline_ms > ? RETURNING *",
        (now, now, namespace, session_id, worker_id, now),
    )
    return None if row is None else record_of(row, now)


def schedule_into(
    tx: Tx,
    namespace: str,
    run_id: str,
    task_queue: str,
    options: options_pb2.SessionOptions,
    now: int,
) -> tuple[str, str | None]:
    """Records the session an activity is scheduled into (created ``pending`` by the first
    one): its id and, when it is closed, its close reason."""
    session_id = session_id_of(options, run_id)
    tx.run(
        "INSERT INTO worker_sessions (namespace, session_id, run_id, task_queue, options, "
        "requires, lease_ms, ttl_ms, max_activities, state, created_at_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?) "
        "ON CONFLICT (namespace, session_id) DO NOTHING",
        (
            namespace,
            session_id,
            None if options.session_id else run_id,
            task_queue,
            options.SerializeToString(),
            json.dumps(dict(sorted(options.requires.items()))),
            options.lease_seconds * 1000,
            options.ttl_seconds * 1000,
            options.max_concurrent_activities,
            now,
        ),
    )
    row = tx.one(
        "SELECT state, close_reason FROM worker_sessions WHERE namespace = ? AND session_id = ?",
        (namespace, session_id),
    )
    assert row is not None
    return session_id, (row["close_reason"] or "closed") if row["state"] == "closed" else None


def closed_reason(tx: Tx, namespace: str, session_id: str) -> str | None:
    row = tx.one(
        "SELECT state, close_reason FROM worker_sessions WHERE namespace = ? AND session_id = ?",
        (namespace, session_id),
    )
    if row is None or row["state"] != "closed":
        return None
    return str(row["close_reason"] or "closed")


def closed_failure(session_id: str, reason: str) -> payload_pb2.Failure:
    return payload_pb2.Failure(
        type=SESSION_CLOSED_ERROR,
        message=f"worker session {session_id!r} is closed ({reason})",
        non_retryable=True,
    )


def fail_for_closed(tx: Tx, task: Row, reason: str, now: int) -> None:
    """Fails the activity ``task`` (not leased) for good: its session is closed."""
    failure = closed_failure(str(task["session_id"]), reason)
    last = blob(task["last_failure"])
    if last:
        failure.cause.CopyFrom(payload_pb2.Failure.FromString(last))
    tx.run(
        "UPDATE tasks SET state = 'failed', due_ms = NULL, queue_deadline_ms = NULL, "
        "last_failure = ? WHERE task_id = ?",
        (failure.SerializeToString(), task["task_id"]),
    )
    append_event(
        tx,
        task["namespace"],
        task["run_id"],
        now,
        "activity_failed",
        history_pb2.ActivityFailed(
            seq=task["seq"],
            failure=failure,
            attempt=task["attempt"],
            worker_id=task["worker_id"] or "",
            fencing_token=task["fencing_token"],
        ),
    )
    queue = tx.value(
        "SELECT task_queue FROM runs WHERE namespace = ? AND run_id = ?",
        (task["namespace"], task["run_id"]),
    )
    ensure_workflow_task(tx, task["namespace"], task["run_id"], str(queue), now)


def close(tx: Tx, namespace: str, session_id: str, reason: str, now: int) -> Row | None:
    """Closes the session and fails its queued and waiting activities (one transaction:
    the caller's). Running attempts finish; their retries fail (``_retry_or_fail``)."""
    row = tx.one(
        "UPDATE worker_sessions SET state = 'closed', close_reason = ?, "
        "lease_expires_ms = CASE WHEN lease_expires_ms > ? THEN ? ELSE lease_expires_ms END "
        "WHERE namespace = ? AND session_id = ? AND state <> 'closed' RETURNING *",
        (reason, now, now, namespace, session_id),
    )
    if row is None:
        return None
    for task in tx.all(
        "SELECT * FROM tasks WHERE namespace = ? AND session_id = ? AND kind = 'activity' "
        f"AND state IN ('queued', 'waiting'){tx.row_lock_suffix}",
        (namespace, session_id),
    ):
        fail_for_closed(tx, task, reason, now)
    return row


def expire_due(tx: Tx, now: int, limit: int) -> int:
    """The due pass: closes sessions past their TTL deadline (``ttl_expired``)."""
    rows = tx.all(
        "SELECT namespace, session_id FROM worker_sessions WHERE state <> 'closed' "
        f"AND ttl_deadline_ms IS NOT NULL AND ttl_deadline_ms <= ? LIMIT ?{tx.claim_lock_suffix}",
        (now, limit),
    )
    for row in rows:
        close(tx, row["namespace"], row["session_id"], TTL_EXPIRED, now)
    return len(rows)


def next_expiry_ms(tx: Tx) -> int | None:
    value = tx.value(
        "SELECT MIN(ttl_deadline_ms) AS m FROM worker_sessions WHERE state <> 'closed' "
        "AND ttl_deadline_ms IS NOT NULL"
    )
    return None if value is None else int(value)


def record_of(row: Row, now: int) -> WorkerSessionRecord:
    state = str(row["state"])
    if state == "active" and not is_live(row, now):
        state = "lost"
    return WorkerSessionRecord(
        namespace=row["namespace"],
        session_id=row["session_id"],
        task_queue=row["task_queue"],
        state=state,
        holder_worker_id=row["holder"],
        generation=int(row["generation"]),
        lease_expires_at_ms=row["lease_expires_ms"],
        ttl_expires_at_ms=row["ttl_deadline_ms"],
        options=bytes(row["options"]),
        close_reason=row["close_reason"],
        created_at_ms=int(row["created_at_ms"]),
        reacquisitions=int(row["reacquisitions"]),
    )


def next_lapse_ms(tx: Tx, namespace: str, task_queue: str, worker_id: str, now: int) -> int | None:
    """When the next session of the queue held by another worker loses its holder (its
    lease ends): a poll that found nothing looks again then."""
    value = tx.value(
        "SELECT MIN(lease_expires_ms) AS m FROM worker_sessions WHERE namespace = ? "
        "AND task_queue = ? AND state = 'active' AND holder <> ? AND lease_expires_ms > ?",
        (namespace, task_queue, worker_id, now),
    )
    return None if value is None else int(value)


def session_slot_freed(tx: Tx, task: Row) -> None:
    """A session's attempt ended: its holder's polls may claim the next one (its
    max_concurrent_activities bound), so they are woken."""
    if task["session_id"] is not None:
        tx.notes.tasks.add((task["namespace"], task["task_queue"], "activity"))
