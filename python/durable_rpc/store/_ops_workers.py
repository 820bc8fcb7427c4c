"""Workers: registration (with the definitions they serve), heartbeat, deregistration."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

from durable_rpc.errors import (
    DefinitionChangedError,
    DefinitionRemovedError,
    InvalidArgumentError,
    NotFoundError,
)
from durable_rpc.store._declared_signals import signals_text
from durable_rpc.store._definition_fingerprints import (
    ChangedDefinition,
    changed_message,
    open_runs_pinned_elsewhere,
    record_same_code,
    same_code,
)
from durable_rpc.store._definition_records import CodeFingerprints
from durable_rpc.store._fleet_records import WorkerCounters
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._removed import removed_message
from durable_rpc.store._shared import require, require_namespace, version_or_default
from durable_rpc.store._tx import Tx

#: A worker that reports nothing beyond its fingerprint's value.
_UNNAMED_CLAIM = CodeFingerprints()


class _WorkerOps(_SqlOpsBase):
    """The worker registry."""

    async def register_worker(
        self,
        namespace: str,
        worker_id: str,
        task_queue: str,
        definitions: Sequence[tuple[str, str, str]],
        activities: Sequence[str],
        build_id: str,
        allow_definition_change: bool,
        declared_signals: Mapping[tuple[str, str], Sequence[str]] | None = None,
        fingerprints: Mapping[tuple[str, str], CodeFingerprints] | None = None,
    ) -> None:
        """``declared_signals``: by (name, version), the only signal names a run of that
        code reads (the definition keeps them; signals to its runs are checked against
        them, ``_declared_signals``). A definition not in it accepts every name.
        ``fingerprints``: by (name, version), the algorithm of its fingerprint and its
        fingerprints under earlier algorithms (``_definition_fingerprints``); a
        definition not in it names no algorithm. A changed fingerprint refused while
        open runs are pinned raises one DefinitionChangedError naming every such
        definition."""
        require(worker_id, "worker_id")
        require(task_queue, "task_queue")
        defs = [(name, version_or_default(version), fp) for name, version, fp in definitions]
        for name, _, fingerprint in defs:
            require(name, "definition name")
            require(fingerprint, f"fingerprint of {name!r}")

        activities_json = json.dumps(list(activities))
        signals_json = {
            (name, version_or_default(version)): signals_text(names)
            for (name, version), names in (declared_signals or {}).items()
        }
        claims = {
            (name, version_or_default(version)): claim
            for (name, version), claim in (fingerprints or {}).items()
        }

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            changed: list[ChangedDefinition] = []
            # In one order, so two registrations never wait on each other's locks.
            for name, version, fingerprint in sorted(defs):
                # The row lock RemoveDefinition takes too: a removal racing this
                # registration either sees its worker or is seen here (_ops_definitions).
                signals = signals_json.get((name, version))
                claim = claims.get((name, version), _UNNAMED_CLAIM)
                row = tx.one(
                    "SELECT fingerprint, fingerprint_algorithm, removed_at_ms, "
                    "declared_signals FROM definitions "
                    f"WHERE namespace = ? AND name = ? AND version = ?{tx.row_lock_suffix}",
                    (namespace, name, version),
                )
                if row is not None and row["removed_at_ms"] is not None:
                    raise DefinitionRemovedError(removed_message(name, version, "registered"))
                if row is None:
                    tx.run(
                        "INSERT INTO definitions (namespace, name, version, fingerprint, "
                        "fingerprint_algorithm, registered_at_ms, declared_signals) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            namespace,
                            name,
                            version,
                            fingerprint,
                            claim.recorded_algorithm,
                            now,
                            signals,
                        ),
                    )
                elif same_code(row, fingerprint, claim):
                    record_same_code(tx, namespace, name, version, row, fingerprint, claim)
                    if row["declared_signals"] != signals:
                        # The same code from an SDK that declares differently (one from
                        # before declarations): the last registration's word holds.
                        tx.run(
                            "UPDATE definitions SET declared_signals = ? "
                            "WHERE namespace = ? AND name = ? AND version = ?",
                            (signals, namespace, name, version),
                        )
                else:
                    pinned = open_runs_pinned_elsewhere(tx, namespace, name, version, fingerprint)
                    if pinned and not allow_definition_change:
                        stored_algorithm = row["fingerprint_algorithm"]
                        compared = claim.under(stored_algorithm, fingerprint) is not None
                        changed.append(
                            ChangedDefinition(name, version, pinned, stored_algorithm, compared)
                        )
                        continue
                    # No open run is pinned to other code (or the operator overrode it):
                    # nothing can be reinterpreted, so the new code simply takes over.
                    tx.run(
                        "UPDATE definitions SET fingerprint = ?, fingerprint_algorithm = ?, "
                        "registered_at_ms = ?, declared_signals = ? "
                        "WHERE namespace = ? AND name = ? AND version = ?",
                        (
                            fingerprint,
                            claim.recorded_algorithm,
                            now,
                            signals,
                            namespace,
                            name,
                            version,
                        ),
                    )
            if changed:
                # Raised once every definition was looked at, so one refusal names all.
                raise DefinitionChangedError(changed_message(changed))
            tx.run(
                "INSERT INTO workers (namespace, worker_id, task_queue, build_id, activities, "
                "registered_at_ms, last_heartbeat_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace, worker_id) DO UPDATE SET "
                "task_queue = excluded.task_queue, "
                "build_id = excluded.build_id, activities = excluded.activities, "
                "registered_at_ms = excluded.registered_at_ms, "
                "last_heartbeat_ms = excluded.last_heartbeat_ms, "
                # A registration starts a process's life (its counts start at zero):
                # the last process's report under this id is not this one's.
                "claims = 0, completions = 0, failures = 0, lease_losses = 0, "
                "slots_in_use = 0, slots_total = 0",
                (
                    namespace,
                    worker_id,
                    task_queue,
                    build_id,
                    activities_json,
                    now,
                    now,
                ),
            )
            tx.run(
                "DELETE FROM worker_definitions WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )
            for name, version, _ in dict.fromkeys(defs):
                tx.run(
                    "INSERT INTO worker_definitions (namespace, worker_id, name, version) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (namespace, worker_id, name, version),
                )
            # What its activity claims filter on (``_ops_activities.SERVED_ACTIVITIES``).
            tx.run(
                "DELETE FROM worker_activities WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )
            for activity_type in dict.fromkeys(activities):
                tx.run(
                    "INSERT INTO worker_activities (namespace, worker_id, activity_type) "
                    "VALUES (?, ?, ?)",
                    (namespace, worker_id, activity_type),
                )

        await self._write(op)

    async def worker_heartbeat(
        self, namespace: str, worker_id: str, counters: WorkerCounters | None = None
    ) -> None:
        """Marks the worker live; ``counters`` (what it counted so far) replace its last
        report (None keeps it)."""
        if counters is not None:
            _check_counters(counters)

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            if counters is None:  # a worker that counts nothing keeps the last report
                changed = tx.run(
                    "UPDATE workers SET last_heartbeat_ms = ? "
                    "WHERE namespace = ? AND worker_id = ?",
                    (tx.now_ms(), namespace, worker_id),
                )
            else:
                # The counters ride on the heartbeat's own write: the task path never
                # writes them (ListWorkers shows them as of the last heartbeat).
                changed = tx.run(
                    "UPDATE workers SET last_heartbeat_ms = ?, claims = ?, completions = ?, "
                    "failures = ?, lease_losses = ?, slots_in_use = ?, slots_total = ? "
                    "WHERE namespace = ? AND worker_id = ?",
                    (
                        tx.now_ms(),
                        counters.claims,
                        counters.completions,
                        counters.failures,
                        counters.lease_losses,
                        counters.slots_in_use,
                        counters.slots_total,
                        namespace,
                        worker_id,
                    ),
                )
            if not changed:
                raise NotFoundError(f"worker {worker_id!r} is not registered")

        await self._write(op)

    async def deregister_worker(self, namespace: str, worker_id: str) -> None:
        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            tx.run(
                "DELETE FROM worker_definitions WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )
            tx.run(
                "DELETE FROM worker_activities WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )
            tx.run(
                "DELETE FROM workers WHERE namespace = ? AND worker_id = ?",
                (namespace, worker_id),
            )

        await self._write(op)


def _check_counters(counters: WorkerCounters) -> None:
    """A heartbeat's counters are counts: never negative (the proto's int64/int32 keep
    them within the columns)."""
    for field in dataclasses.fields(counters):
        if getattr(counters, field.name) < 0:
            raise InvalidArgumentError(f"counters.{field.name} must not be negative")
