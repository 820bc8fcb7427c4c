"""Time skipping support for ``durable_rpc.testing``: when may the clock jump, and where to.

A test environment skips time only when every remaining task waits on time alone: nothing
is queued (claimable work a worker is about to take) and nothing is leased (work running
right now, whose lease a jump would expire). Both questions are answered from indexes
(``tasks_due`` and ``tasks_next_due``/``tasks_queue_deadline``), never a table scan.

Schedules count as work too: a due schedule slot not fired yet, or a waiting (buffered)
due time whose run closed, is work the schedule loop is about to do, so the clock does
not jump while one exists. A jump stops at the next schedule slot, so each fires at its
own moment; but a slot alone is no reason to jump (schedules fire forever: automatic
skipping would never end), only something a run waits on, or a test's explicit sleep.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from durable_rpc.store._logic import earliest
from durable_rpc.store._schedule_buffer import READY_SQL
from durable_rpc.store._tx import Tx


@dataclass(frozen=True, slots=True)
class SkipReport:
    """What one skip attempt did: how far the clock moved and the database time after."""

    skipped_ms: int
    db_now_ms: int
    #: False when queued or leased work prevented the skip.
    idle: bool
    #: A schedule has something to start now (the schedule loop should run).
    schedule_due: bool = False


# The invariant "due_ms is non-NULL exactly while queued, leased or waiting" lets the
# `due_ms IS NOT NULL` predicate select the partial index tasks_due (kind, state, due_ms).
_BUSY_SQL = (
    "SELECT 1 AS busy FROM tasks WHERE kind IN ('workflow', 'activity', 'timer') "
    "AND state IN ('queued', 'leased') AND due_ms IS NOT NULL LIMIT 1"
)
_NEXT_DUE_SQL = "SELECT MIN(due_ms) AS m FROM tasks WHERE state IN ('waiting', 'leased')"
_NEXT_DEADLINE_SQL = (
    "SELECT MIN(queue_deadline_ms) AS m FROM tasks WHERE queue_deadline_ms IS NOT NULL"
)
# The partial index runs_deadline: execution/run timeouts and cancellation cleanup
# deadlines, which the due pass closes runs at (a jump must stop there too, not pass it
# for a later timer).
_NEXT_RUN_DEADLINE_SQL = "SELECT MIN(deadline_ms) AS m FROM runs WHERE deadline_ms IS NOT NULL"
# The index schedules_by_fire_at (NULL while paused).
_NEXT_SCHEDULE_SQL = "SELECT MIN(fire_at_ms) AS m FROM schedules WHERE fire_at_ms IS NOT NULL"


def schedule_due(tx: Tx, now_ms: int) -> bool:
    """Whether a schedule has something to start at ``now_ms``: a due slot, or a waiting
    due time whose run closed."""
    nxt = tx.value(_NEXT_SCHEDULE_SQL)
    if nxt is not None and int(nxt) <= now_ms:
        return True
    return tx.one(f"{READY_SQL} LIMIT 1") is not None


class Idleness(NamedTuple):
    #: Nothing is queued or leased, and no schedule has something to start now.
    idle: bool
    #: The earliest timer, backoff or activity deadline (None: nothing waits on time).
    next_due_ms: int | None = None
    #: The earliest schedule slot: where a jump must stop.
    next_schedule_ms: int | None = None
    #: A schedule has something to start now.
    schedule_due: bool = False


def idleness(tx: Tx, now_ms: int) -> Idleness:
    """Whether the clock may jump at ``now_ms``, and the due times a jump goes to or stops
    at."""
    if schedule_due(tx, now_ms):
        return Idleness(idle=False, schedule_due=True)
    if tx.one(_BUSY_SQL) is not None:
        return Idleness(idle=False)
    due = earliest(
        tx.value(_NEXT_DUE_SQL), tx.value(_NEXT_DEADLINE_SQL), tx.value(_NEXT_RUN_DEADLINE_SQL)
    )
    nxt = tx.value(_NEXT_SCHEDULE_SQL)
    return Idleness(True, due, None if nxt is None else int(nxt))
