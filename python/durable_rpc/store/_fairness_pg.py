"""Priority and fairness on PostgreSQL: the hot-path decision function re-created so
that what it cannot order (``_fairness``) goes to the general path."""

from __future__ import annotations

from durable_rpc.store._fairness import DEFAULT_PRIORITY
from durable_rpc.store._pg_hot_sql import _patched
from durable_rpc.store._rate_limits import (
    _record_decision_with_rate_limits as _latest_record_decision,
)


def _record_decision_fair() -> str:
    """PostgreSQL's hot-path decision function with priority and fairness left to the
    general path (DRFB1): a run with a priority or a fairness key set (its activity rows
    take both and a pass, ``_queue_activity``), and an eager claim while a more urgent
    activity is queued on the run's queue (the claim order says that one goes first).
    Built on the latest definition; the run's columns are in the row the function reads
    anyway, and the probe (one seek of ``tasks_ready``) runs only for eager decisions."""
    check = """    RAISE EXCEPTION 'the run is pinned to another build' USING ERRCODE = 'DRFB1';
  END IF;
"""
    return _patched(
        _latest_record_decision(),
        (
            check,
            check
            + f"""  IF r.priority <> {DEFAULT_PRIORITY} OR r.fairness_key IS NOT NULL THEN
    RAISE EXCEPTION 'the run has a priority or fairness key' USING ERRCODE = 'DRFB1';
  END IF;
  IF true = ANY (p_eager) AND EXISTS (SELECT 1 FROM tasks h WHERE h.namespace = p_ns
      AND h.kind = 'activity' AND h.task_queue = r.task_queue AND h.state = 'queued'
      AND h.priority < {DEFAULT_PRIORITY}) THEN
    RAISE EXCEPTION 'a more urgent activity is queued' USING ERRCODE = 'DRFB1';
  END IF;
""",
        ),
    )


def pg_functions() -> tuple[str, ...]:
    """The migration's PostgreSQL-only part: the patched hot path. (The hot start,
    ``drpc_start_workflow``, is not sent a start with a priority or key: ``_postgres``.)"""
    return (_record_decision_fair(),)
