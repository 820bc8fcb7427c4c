"""A schedule's buffer: due times that wait for the schedule's open run to close.

One mechanism for the three waiting overlap policies: ``BUFFER_ONE`` and ``CANCEL_OTHER``
keep the newest waiting due time (one row at most), ``BUFFER_ALL`` keeps every one (at
most ``BUFFER_MAX``), and the firing pass starts the oldest waiting due time once the last
run closed. Taking it out of the buffer is a fenced DELETE of that row, so of two
replicas' passes only the one whose DELETE matched starts it.
"""

from __future__ import annotations

from durable_rpc.store._dialects import Dialect
from durable_rpc.store._tx import Tx

#: The overlap policies that make a due time wait in the buffer instead of skipping it.
BUFFERING = ("BUFFER_ONE", "BUFFER_ALL", "CANCEL_OTHER")
#: Due times one BUFFER_ALL schedule keeps waiting (Temporal's bound too); a due time
#: beyond it is recorded as skipped rather than growing the table without bound.
BUFFER_MAX = 1000


def schedule_buffer_table(d: Dialect) -> tuple[str, ...]:
    """The migration: the buffer table, and BUFFER_ONE's one-column buffer moved into it."""
    return (
        f"""CREATE TABLE schedule_buffer (
            namespace TEXT NOT NULL,
            schedule_id TEXT NOT NULL,
            due_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, schedule_id, due_ms)
        )""",
        "INSERT INTO schedule_buffer (namespace, schedule_id, due_ms) "
        "SELECT namespace, schedule_id, buffered_due_ms FROM schedules "
        "WHERE buffered_due_ms IS NOT NULL",
        "ALTER TABLE schedules DROP COLUMN buffered_due_ms",
    )


def waiting(tx: Tx, namespace: str, schedule_id: str) -> int:
    """How many due times wait in the schedule's buffer."""
    return int(
        tx.value(
            "SELECT COUNT(*) FROM schedule_buffer WHERE namespace = ? AND schedule_id = ?",
            (namespace, schedule_id),
        )
        or 0
    )


def push(tx: Tx, namespace: str, schedule_id: str, due_ms: int, overlap: str) -> bool:
    """Adds a waiting due time; False when a BUFFER_ALL buffer is full (not added)."""
    if overlap == "BUFFER_ALL":
        if waiting(tx, namespace, schedule_id) >= BUFFER_MAX:
            return False
    else:  # BUFFER_ONE, CANCEL_OTHER: the newest due time replaces the one waiting
        clear(tx, namespace, schedule_id)
    tx.run(
        "INSERT INTO schedule_buffer (namespace, schedule_id, due_ms) VALUES (?, ?, ?) "
        "ON CONFLICT (namespace, schedule_id, due_ms) DO NOTHING",
        (namespace, schedule_id, due_ms),
    )
    return True


def take_oldest(tx: Tx, namespace: str, schedule_id: str) -> int | None:
    """Removes and returns the oldest waiting due time (None: none, or another pass took
    it first: the DELETE is the fence)."""
    due = tx.value(
        "SELECT MIN(due_ms) FROM schedule_buffer WHERE namespace = ? AND schedule_id = ?",
        (namespace, schedule_id),
    )
    if due is None:
        return None
    taken = tx.run(
        "DELETE FROM schedule_buffer WHERE namespace = ? AND schedule_id = ? AND due_ms = ?",
        (namespace, schedule_id, due),
    )
    return int(due) if taken else None


def clear(tx: Tx, namespace: str, schedule_id: str) -> None:
    tx.run(
        "DELETE FROM schedule_buffer WHERE namespace = ? AND schedule_id = ?",
        (namespace, schedule_id),
    )


# An unpaused schedule with a waiting due time whose last run is not open. Driven from the
# buffer (small: only schedules with waiting due times have rows), never a schedules scan.
READY_SQL = (
    "SELECT DISTINCT b.namespace, b.schedule_id FROM schedule_buffer b "
    "JOIN schedules s ON s.namespace = b.namespace AND s.schedule_id = b.schedule_id "
    "WHERE s.paused = 0 AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.namespace = s.namespace "
    "AND r.run_id = s.last_run_id AND r.status = 'running')"
)


def ready(tx: Tx, limit: int) -> list[tuple[str, str]]:
    """Schedules whose oldest waiting due time may start now (at most ``limit``)."""
    return [
        (row["namespace"], row["schedule_id"])
        for row in tx.all(f"{READY_SQL} ORDER BY b.namespace, b.schedule_id LIMIT ?", (limit,))
    ]


def blocking(tx: Tx, limit: int) -> frozenset[tuple[str, str]]:
    """(namespace, run id) of the open runs that unpaused schedules' waiting due times wait
    for (at most ``limit``): the schedule loop looks again when one of them closes."""
    rows = tx.all(
        "SELECT DISTINCT s.namespace, s.last_run_id FROM schedule_buffer b "
        "JOIN schedules s ON s.namespace = b.namespace AND s.schedule_id = b.schedule_id "
        "WHERE s.paused = 0 AND s.last_run_id IS NOT NULL LIMIT ?",
        (limit,),
    )
    return frozenset((row["namespace"], row["last_run_id"]) for row in rows)
