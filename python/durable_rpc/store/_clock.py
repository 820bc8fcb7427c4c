"""Time skipping support for ``durable_rpc.testing``: when may the clock jump, and where to.

A test environment skips time only when every remaining task waits on time alone: nothing
is queued (claimable work a worker is about to take) and nothing is leased (work running
right now, whose lease a jump would expire). Both questions are answered from indexes
(``tasks_due`` and ``tasks_next_due``/``tasks_queue_deadline``), never a table scan.
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_rpc.store._logic import earliest
from durable_rpc.store._tx import Tx


@dataclass(frozen=True, slots=True)
class SkipReport:
    """What one skip attempt did: how far the clock moved and the database time after."""

    skipped_ms: int
    db_now_ms: int
    #: False when queued or leased work prevented the skip.
    idle: bool


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


def idle_next_due_ms(tx: Tx) -> tuple[bool, int | None]:
    """(idle, earliest due time): idle when nothing is queued or leased; the due time is
    the earliest timer, backoff or activity deadline (None when nothing waits at all)."""
    if tx.one(_BUSY_SQL) is not None:
        return False, None
    due = earliest(tx.value(_NEXT_DUE_SQL), tx.value(_NEXT_DEADLINE_SQL))
    return True, due
