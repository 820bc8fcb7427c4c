"""What registration decides about a definition's fingerprint (``_ops_workers``).

Each stored fingerprint carries the name of the algorithm that made it
(``definitions.fingerprint_algorithm``; ``durable_rpc.fingerprint_algorithms``). A
worker reports its fingerprint under the current algorithm and, beside it, under each
earlier algorithm it still computes. The stored fingerprint is the worker's code when it
equals the worker's fingerprint under the stored algorithm: then only the algorithm
changed, and the record (with the open runs pinned to it) takes the worker's current
fingerprint in the registration's transaction instead of refusing it. Any other
difference is a change of code, refused while open runs are pinned to the code it
replaces; the refusal names every such definition of the registration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from durable_rpc.fingerprint_algorithms import SOURCE_TEXT_V1, SYNTAX_TREE_V2
from durable_rpc.store._definition_records import CodeFingerprints
from durable_rpc.store._tx import Row, Tx

#: Migration 27 (both backends). Rows last written before migration 7 was applied were
#: written by code of schema versions up to 6, which hashed the source text; every later
#: one by code hashing the syntax tree. ``schema_version`` remembers when 7 was applied
#: (the database clock, as ``registered_at_ms``), so the rule holds however many
#: versions one upgrade applies at once. A fresh database has no rows to label.
FINGERPRINT_ALGORITHM_MIGRATION = (
    "ALTER TABLE definitions ADD COLUMN fingerprint_algorithm TEXT NOT NULL "
    f"DEFAULT '{SYNTAX_TREE_V2}'",
    f"UPDATE definitions SET fingerprint_algorithm = '{SOURCE_TEXT_V1}' "
    "WHERE registered_at_ms < (SELECT applied_at_ms FROM schema_version WHERE version = 7)",
)


@dataclass(frozen=True, slots=True)
class ChangedDefinition:
    """A definition whose code changed while ``pinned`` open runs use the old code.
    ``compared`` is False when the worker reported no fingerprint under the stored
    one's algorithm, so the two could not be compared like with like."""

    name: str
    version: str
    pinned: int
    stored_algorithm: str
    compared: bool


def same_code(stored: Row, value: str, claim: CodeFingerprints) -> bool:
    """Whether the stored fingerprint is the worker's code. An equal current value is
    too, whatever the stored name says: values of two algorithms never coincide (the
    syntax-tree form is prefixed with its own version), and a database written at schema
    version 6 by the first syntax-tree release holds syntax-tree values labelled as
    source text by migration 27."""
    known: str = stored["fingerprint"]
    return known == value or claim.under(stored["fingerprint_algorithm"], value) == known


def record_same_code(
    tx: Tx,
    namespace: str,
    name: str,
    version: str,
    stored: Row,
    value: str,
    claim: CodeFingerprints,
) -> None:
    """The worker's code is the stored one: keep its current fingerprint and algorithm in
    the record's place, and repin the open runs pinned to the stored value, so later
    registrations and the declared-signals lookup compare like with like. A worker that
    names no algorithm leaves an equal record as it is (it cannot say which one it is)."""
    old, old_algorithm = stored["fingerprint"], stored["fingerprint_algorithm"]
    algorithm = (claim.algorithm or old_algorithm) if old == value else claim.recorded_algorithm
    if (old, old_algorithm) == (value, algorithm):
        return
    tx.run(
        "UPDATE definitions SET fingerprint = ?, fingerprint_algorithm = ? "
        "WHERE namespace = ? AND name = ? AND version = ?",
        (value, algorithm, namespace, name, version),
    )
    if old != value:
        tx.run(
            "UPDATE runs SET definition_fingerprint = ? WHERE namespace = ? "
            "AND workflow_type = ? AND workflow_version = ? AND status = 'running' "
            "AND definition_fingerprint = ?",
            (value, namespace, name, version, old),
        )


def open_runs_pinned_elsewhere(
    tx: Tx, namespace: str, name: str, version: str, fingerprint: str
) -> int:
    """Open runs of ``(name, version)`` pinned to code other than ``fingerprint``: the
    runs a changed definition could reinterpret. Runs started before any worker
    registered the definition are pinned to nothing ('') and never block."""
    count = tx.value(
        "SELECT COUNT(*) FROM runs WHERE namespace = ? AND workflow_type = ? "
        "AND workflow_version = ? AND status = 'running' "
        "AND definition_fingerprint <> '' AND definition_fingerprint <> ?",
        (namespace, name, version, fingerprint),
    )
    return int(count or 0)


def changed_message(changed: Sequence[ChangedDefinition]) -> str:
    """DEFINITION_CHANGED's message: every refused definition of the registration, and
    the ways out."""
    return (
        "; ".join(_what_changed(c) for c in changed)
        + " (comments, docstrings and formatting never count). Ways out: register the new "
        "code under a new version (@workflow.defn(version=...)) and keep the old one "
        "deployed until its runs close; guard the change with workflow.patched(...) and "
        "register it with Worker(..., allow_definition_change=True); or, if the change "
        "cannot alter a running history, pass allow_definition_change=True alone"
    )


def _what_changed(c: ChangedDefinition) -> str:
    runs = "1 open run is" if c.pinned == 1 else f"{c.pinned} open runs are"
    which = f"workflow ({c.name!r}, version {c.version!r})"
    if c.compared:
        return f"{which} changed its code, and {runs} pinned to the code it replaces"
    return (
        f"{which} has a stored fingerprint made by the {c.stored_algorithm!r} algorithm, "
        f"which this worker does not report, so its code cannot be shown unchanged, and "
        f"{runs} pinned to that code (a worker whose SDK computes it can confirm it)"
    )
