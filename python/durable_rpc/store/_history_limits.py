"""The per-run history limits (``HistoryLimits``), checked from the run's totals.

A run's length and byte size live on its row (``history_length``,
``history_size_bytes``), kept by every append (``Tx.flush_events``); the transaction's
buffer adds its own appends, so a check costs no query beyond the run row the operation
read anyway, and it is atomic with the change it guards: raising rolls the operation
back.
"""

from __future__ import annotations

from durable_rpc.errors import HistoryLimitExceededError
from durable_rpc.store._options import HistoryLimits
from durable_rpc.store._tx import Tx


class DecisionPastHistoryLimit(HistoryLimitExceededError):
    """Raised inside a workflow-task completion whose commands took the run past the
    hard limit: the completion is rolled back and recorded again as the run's failure."""


def refuse_input(
    tx: Tx,
    limits: HistoryLimits,
    namespace: str,
    run_id: str,
    what: str,
    extra_events: int = 0,
    extra_bytes: int = 0,
) -> None:
    """Raises HISTORY_LIMIT_EXCEEDED when the run's history (this transaction's appends
    included, plus ``extra_*`` of input recorded later, e.g. an update's events) is past
    the hard limit."""
    length, size = tx.history_totals(namespace, run_id)
    length, size = length + extra_events, size + extra_bytes
    if limits.exceeded(length, size):
        raise HistoryLimitExceededError(
            f"{what} refused: the history of run {run_id} would be {length} events and "
            f"{size} bytes, past its limit of {limits.max_events} events or "
            f"{limits.max_bytes} bytes (the workflow should continue-as-new sooner)"
        )


def check_decision(tx: Tx, limits: HistoryLimits, namespace: str, run_id: str) -> None:
    """Raises DecisionPastHistoryLimit when a decision left the open run past the limit."""
    length, size = tx.history_totals(namespace, run_id)
    if limits.exceeded(length, size):
        raise DecisionPastHistoryLimit(
            f"the history of run {run_id} reached {length} events and {size} bytes, past "
            f"its limit of {limits.max_events} events or {limits.max_bytes} bytes"
        )


def warning(limits: HistoryLimits, length: int, size: int) -> str:
    """Describe's sentence from the warn mark on, else ""."""
    if not limits.warned(length, size):
        return ""
    return (
        f"The history has {length} events and {size} bytes, past the warn mark of "
        f"{limits.warn_events} events or {limits.warn_bytes} bytes; at "
        f"{limits.max_events} events or {limits.max_bytes} bytes new input is refused and "
        "the run fails: continue-as-new."
    )
