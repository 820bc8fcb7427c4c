"""Budgets on PostgreSQL's hot path (``_pg_hot_sql``): a decision that closes a run
holding or waiting for a budget reservation is the general path's (``close_run``
releases it and grants the waiters in the same transaction), by the decision
function's fallback (DRFB1) before anything is kept. A run that never reserved pays
one index probe of ``budget_reservations``, only when its decision closes it; a
decision with a budget command never reaches the function (``_pg_hot`` hands the
function only activity schedules and a completion).
"""

from __future__ import annotations

from durable_rpc.store._admission_pg import _record_decision_v17
from durable_rpc.store._pg_hot_sql import _patched

_ADMISSION_CHECK = (
    "    RAISE EXCEPTION 'the namespace has an admission policy' USING ERRCODE = 'DRFB1';\n"
    "  END IF;\n"
)


def _record_decision_v18() -> str:
    """Migration 17's decision function (``_admission_pg``) with a closing decision of
    a run that has a budget reservation left to the general path."""
    return _patched(
        _record_decision_v17(),
        (
            _ADMISSION_CHECK,
            _ADMISSION_CHECK
            + """  IF p_close_attrs IS NOT NULL AND EXISTS (
      SELECT 1 FROM budget_reservations b WHERE b.namespace = p_ns AND b.run_id = v_run) THEN
    RAISE EXCEPTION 'the run has a budget reservation' USING ERRCODE = 'DRFB1';
  END IF;
""",
        ),
    )


def pg_functions() -> tuple[str, ...]:
    """The budgets migration's PostgreSQL-only part: the patched decision."""
    return (_record_decision_v18(),)
