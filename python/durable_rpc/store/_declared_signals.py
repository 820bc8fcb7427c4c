"""Declared signals: a run accepts only the signal names its code reads.

A worker registers, with each definition, the signal names its code reads
(``definitions.declared_signals``, a JSON list; NULL: undeclared, every name accepted).
A run is pinned to the code it started with by ``runs.definition_fingerprint``, so the
set a run accepts is its pinned definition's: read in the statement that already reads
the run (:data:`DECLARED_SIGNALS`), never by a statement of its own. A run started
before any worker registered its type (no fingerprint), or whose pinned code was replaced
under an operator override, has no set and accepts every name, as before declarations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from durable_rpc.errors import SignalNotDeclaredError

#: The migration (both backends): NULL, the default, is "undeclared" for every existing
#: definition, so runs of code registered before it accept every name as they did.
DECLARED_SIGNALS_MIGRATION = ("ALTER TABLE definitions ADD COLUMN declared_signals TEXT",)

#: A select-list item, for a query over ``runs``: the set its pinned definition declared.
DECLARED_SIGNALS = (
    "(SELECT d.declared_signals FROM definitions d WHERE d.namespace = runs.namespace "
    "AND d.name = runs.workflow_type AND d.version = runs.workflow_version "
    "AND d.fingerprint = runs.definition_fingerprint) AS declared_signals"
)


def signals_text(names: Sequence[str]) -> str:
    """The column's form of a declared set (sorted, without repeats)."""
    return json.dumps(sorted(set(names)))


def undeclared(declared: str | None, signal_name: str, run_id: str) -> str | None:
    """Why run ``run_id`` refuses ``signal_name`` (None: it accepts it)."""
    if declared is None:
        return None
    names: list[str] = json.loads(declared)
    if signal_name in names:
        return None
    listed = ", ".join(repr(n) for n in names) or "none"
    return f"run {run_id} does not read signal {signal_name!r} (its code declares: {listed})"


def refuse_undeclared(declared: str | None, signal_name: str, run_id: str) -> None:
    """Raise SignalNotDeclaredError when the run's code does not read ``signal_name``."""
    why = undeclared(declared, signal_name, run_id)
    if why is not None:
        raise SignalNotDeclaredError(why)
