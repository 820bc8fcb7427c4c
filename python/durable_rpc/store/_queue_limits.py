"""Task-queue activity limits: at most N activity attempts leased at once on a queue,
cluster-wide (every replica, every worker), enforced by the claim itself.

A limit is a row of ``task_queue_limits`` (namespace, task_queue). A queue without a row
is unlimited and its claims stay what they were: the claim reads the row with a scalar
subquery folded into the candidate SELECT it runs anyway (``QUEUE_LIMIT_COLUMN``), no
statement more. Only when a row exists does the claim take the row's lock (PostgreSQL:
FOR UPDATE, so two replicas claiming at once serialize on it and the second counts the
first's lease; SQLite has one writer) and count the queue's leased activity attempts in
the same transaction. A claim over the limit leaves the task queued (deferred, never
failed) and marks the row (``claim_deferred``); a completion or failure on a limited
queue wakes its pollers (``slot_freed``) only when the row is marked: otherwise no poll
waits for the slot, and waking every poll of the queue for nothing cost each outcome a
claim per waiting poll.
PostgreSQL's hot-path decision does the same itself for its eager claims and its
activity completions (``pg_functions/drpc_record_decision.v30.sql``).
"""

from __future__ import annotations

from durable_rpc.store._dialects import Dialect
from durable_rpc.store._tx import Row, Tx

#: The candidate SELECT's extra column (alias ``t`` = the candidate task): the queue's
#: limit, NULL when it has none (one primary-key probe inside the same statement).
QUEUE_LIMIT_COLUMN = (
    "(SELECT l.max_concurrent_activities FROM task_queue_limits l "
    "WHERE l.namespace = t.namespace AND l.task_queue = t.task_queue) AS queue_limit"
)

#: A fenced update's RETURNING extra (table ``tasks``): whether the task's queue is
#: limited, so the outcome of an attempt knows to wake the queue's deferred pollers.
QUEUE_LIMITED_RETURNING = (
    "*, (SELECT 1 FROM task_queue_limits l WHERE l.namespace = tasks.namespace "
    "AND l.task_queue = tasks.task_queue) AS queue_limited"
)


def task_queue_limits_table(d: Dialect) -> tuple[str, ...]:
    """The limits table (same shape on both backends)."""
    return (
        f"""CREATE TABLE task_queue_limits (
            namespace TEXT NOT NULL,
            task_queue TEXT NOT NULL,
            max_concurrent_activities INTEGER NOT NULL CHECK (max_concurrent_activities > 0),
            updated_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, task_queue)
        )""",
    )


#: Migration 30: the mark a claim deferred by the limit leaves on the row.
CLAIM_DEFERRED_MIGRATION = (
    "ALTER TABLE task_queue_limits ADD COLUMN claim_deferred INTEGER NOT NULL DEFAULT 0",
)


def activities_in_use(tx: Tx, namespace: str, task_queue: str) -> int:
    """The queue's leased activity attempts (an expired lease still counts: its attempt
    may still be running until the expiry pass takes it back)."""
    return int(
        tx.value(
            "SELECT count(*) FROM tasks WHERE namespace = ? AND kind = 'activity' "
            "AND task_queue = ? AND due_ms IS NOT NULL AND state = 'leased'",
            (namespace, task_queue),
        )
    )


def free_slots(tx: Tx, namespace: str, task_queue: str) -> int | None:
    """How many more attempts the queue may lease now (None: no limit). Locks the limit
    row for the rest of the transaction, so concurrent claims on the queue count each
    other's leases."""
    limit = tx.value(
        "SELECT max_concurrent_activities FROM task_queue_limits "
        f"WHERE namespace = ? AND task_queue = ?{tx.row_lock_suffix}",
        (namespace, task_queue),
    )
    if limit is None:
        return None
    return max(0, int(limit) - activities_in_use(tx, namespace, task_queue))


def mark_deferred(tx: Tx, namespace: str, task_queue: str) -> None:
    """A poll's claim was deferred by the limit (the row is locked by ``free_slots``): the
    next attempt's outcome on the queue wakes its polls."""
    tx.run(
        "UPDATE task_queue_limits SET claim_deferred = 1 "
        "WHERE namespace = ? AND task_queue = ? AND claim_deferred = 0",
        (namespace, task_queue),
    )


def slot_freed(tx: Tx, task: Row) -> None:
    """After an attempt's outcome on a limited queue: when a claim was deferred since the
    last wake-up, wake the queue's activity polls (it may now succeed) and clear the mark.
    The row is locked first: a claim counting the leases at the same time waits for this
    commit and sees the slot free, or marked the row before and is woken. ``task`` is a
    row read with ``QUEUE_LIMITED_RETURNING``."""
    if not task["queue_limited"]:
        return
    key = (task["namespace"], task["task_queue"])
    marked = tx.value(
        "SELECT claim_deferred FROM task_queue_limits "
        f"WHERE namespace = ? AND task_queue = ?{tx.row_lock_suffix}",
        key,
    )
    if marked:
        tx.run(
            "UPDATE task_queue_limits SET claim_deferred = 0 "
            "WHERE namespace = ? AND task_queue = ?",
            key,
        )
        tx.notes.tasks.add((*key, "activity"))
