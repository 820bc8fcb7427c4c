"""Namespace admission on PostgreSQL's hot path (``_pg_hot_sql``): a namespace with an
admission policy (``_admission``) is the general path's for a start (admit, defer or
refuse it) and for a decision that closes its run (the room goes to the next waiting
run in the same transaction), by the functions' fallback (DRFB1) before anything is
kept. A namespace without a policy pays one primary-key probe folded into a statement
each function runs anyway (the start's run INSERT) or, for a decision, one probe only
when it closes the run.
"""

from __future__ import annotations

from durable_rpc.store._pg_hot_sql import _START_WORKFLOW_V12, _patched
from durable_rpc.store._queue_limits import _record_decision_v15

_LIMITED_QUEUE_CHECK = (
    "    RAISE EXCEPTION 'a task queue of the namespace is limited' USING ERRCODE = 'DRFB1';\n"
    "  END IF;\n"
)


def _record_decision_v17() -> str:
    """Migration 15's decision function (``_queue_limits``) with a closing decision in a
    namespace with an admission policy left to the general path."""
    return _patched(
        _record_decision_v15(),
        (
            _LIMITED_QUEUE_CHECK,
            _LIMITED_QUEUE_CHECK
            + """  IF p_close_attrs IS NOT NULL AND EXISTS (
      SELECT 1 FROM namespace_admission a WHERE a.namespace = p_ns) THEN
    RAISE EXCEPTION 'the namespace has an admission policy' USING ERRCODE = 'DRFB1';
  END IF;
""",
        ),
    )


def _start_workflow_v17() -> str:
    """Migration 12's start function with a namespace that has an admission policy left
    to the general path: the run INSERT's RETURNING reads the policy's existence."""
    return _patched(
        _START_WORKFLOW_V12,
        ("  v_removed bigint;\n", "  v_removed bigint;\n  v_admission boolean;\n"),
        (
            """      WHERE d.namespace = p_ns AND d.name = p_type AND d.version = p_version)
    INTO v_fingerprint, v_removed;
""",
            """      WHERE d.namespace = p_ns AND d.name = p_type AND d.version = p_version),
      EXISTS (SELECT 1 FROM namespace_admission a WHERE a.namespace = p_ns)
    INTO v_fingerprint, v_removed, v_admission;
  IF v_admission THEN
    RAISE EXCEPTION 'the namespace has an admission policy' USING ERRCODE = 'DRFB1';
  END IF;
""",
        ),
    )


def pg_functions() -> tuple[str, ...]:
    """The admission migration's PostgreSQL-only part: both patched functions."""
    return (_record_decision_v17(), _start_workflow_v17())
