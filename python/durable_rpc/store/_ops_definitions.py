"""Definitions as an operator sees them: list, remove (when nothing references one),
restore (AdminService.ListDefinitions / RemoveDefinition / RestoreDefinition).

A removed definition (``definitions.removed_at_ms``) is refused at registration
(``_ops_workers.register_worker``) and at the start of a new run (``_runs.create_run``;
a child start records ChildWorkflowStartFailed) with DEFINITION_REMOVED, until restored.
Removal checks and marks in one transaction holding the definition's row lock, the lock
registration takes too, so a worker registering it meanwhile either comes first (and
the removal sees it: DEFINITION_IN_USE) or after (and is refused).
"""

from __future__ import annotations

from dataclasses import replace

from durable_rpc.errors import DefinitionInUseError, NotFoundError
from durable_rpc.store._definition_records import DefinitionRecord
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._options import StoreOptions
from durable_rpc.store._shared import ACTIVE, require, require_namespace, version_or_default
from durable_rpc.store._tx import Row, Tx

# Open runs of each definition by the state of their workflow task (a run has at most
# one active workflow task: ensure_workflow_task); failed runs beside them. Params:
# now x4, namespace. The proto's categories: queued = visible now and not leased (a
# retry whose backoff ended is as good as queued), leased, recoverable = leased with
# its lease expired, waiting = no workflow task due (timers, activities, signals, a
# backoff or delayed start not over).
_RUN_COUNTS = (
    "SELECT r.workflow_type AS name, r.workflow_version AS version, "
    "SUM(CASE WHEN r.status = 'running' AND t.state IN ('queued', 'waiting') "
    "AND t.due_ms <= ? THEN 1 ELSE 0 END) AS queued, "
    "SUM(CASE WHEN r.status = 'running' AND t.state = 'leased' AND t.expires_at_ms > ? "
    "THEN 1 ELSE 0 END) AS leased, "
    "SUM(CASE WHEN r.status = 'running' AND t.state = 'leased' AND t.expires_at_ms <= ? "
    "THEN 1 ELSE 0 END) AS recoverable, "
    "SUM(CASE WHEN r.status = 'running' AND (t.task_id IS NULL OR "
    "(t.state IN ('queued', 'waiting') AND (t.due_ms IS NULL OR t.due_ms > ?))) "
    "THEN 1 ELSE 0 END) AS waiting, "
    "SUM(CASE WHEN r.status = 'failed' THEN 1 ELSE 0 END) AS failed "
    "FROM runs r LEFT JOIN tasks t ON t.namespace = r.namespace AND t.run_id = r.run_id "
    f"AND t.kind = 'workflow' AND t.state IN {ACTIVE} "
    "WHERE r.namespace = ? AND r.status IN ('running', 'failed')"
)


def _live_since(tx: Tx, options: StoreOptions) -> int:
    """The oldest heartbeat (database time) of a live worker: describe's rule."""
    return tx.now_ms() - options.worker_liveness_ms


def _live_workers(
    tx: Tx, namespace: str, since: int, where: str = "", params: tuple[object, ...] = ()
) -> dict[tuple[str, str], list[str]]:
    """The live workers registering each (name, version), by worker id."""
    rows = tx.all(
        "SELECT wd.name, wd.version, wd.worker_id FROM worker_definitions wd JOIN workers w "
        "ON w.namespace = wd.namespace AND w.worker_id = wd.worker_id "
        f"WHERE wd.namespace = ? AND w.last_heartbeat_ms >= ?{where} ORDER BY wd.worker_id",
        (namespace, since, *params),
    )
    live: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        live.setdefault((row["name"], row["version"]), []).append(row["worker_id"])
    return live


def _record(definition: Row, live: list[str], counts: Row | None) -> DefinitionRecord:
    def count(column: str) -> int:
        return int(counts[column] or 0) if counts is not None else 0

    return DefinitionRecord(
        name=definition["name"],
        version=definition["version"],
        fingerprint=definition["fingerprint"],
        registered_at_ms=definition["registered_at_ms"],
        removed_at_ms=definition["removed_at_ms"],
        live_worker_ids=tuple(live),
        queued_runs=count("queued"),
        leased_runs=count("leased"),
        recoverable_runs=count("recoverable"),
        waiting_runs=count("waiting"),
        failed_runs=count("failed"),
    )


def _describe(tx: Tx, since: int, namespace: str, definition: Row) -> DefinitionRecord:
    """One definition's record (inside the caller's transaction)."""
    name, version = definition["name"], definition["version"]
    now = tx.now_ms()
    counts = tx.one(
        _RUN_COUNTS + " AND r.workflow_type = ? AND r.workflow_version = ? "
        "GROUP BY r.workflow_type, r.workflow_version",
        (now, now, now, now, namespace, name, version),
    )
    live = _live_workers(
        tx, namespace, since, " AND wd.name = ? AND wd.version = ?", (name, version)
    )
    return _record(definition, live.get((name, version), []), counts)


def _in_use_message(record: DefinitionRecord) -> str:
    what = []
    if record.live_worker_ids:
        workers = ", ".join(record.live_worker_ids)
        what.append(f"live workers register it ({workers}): stop or redeploy them without it")
    if record.open_runs:
        what.append(
            f"{record.open_runs} open runs reference it ({record.queued_runs} queued, "
            f"{record.leased_runs} leased, {record.recoverable_runs} recoverable, "
            f"{record.waiting_runs} waiting): let them close, or cancel/terminate them"
        )
    return (
        f"workflow ({record.name!r}, version {record.version!r}) is in use, so it is not "
        "removed: " + "; ".join(what)
    )


class _DefinitionOps(_SqlOpsBase):
    """ListDefinitions, RemoveDefinition, RestoreDefinition."""

    async def list_definitions(self, namespace: str) -> list[DefinitionRecord]:
        """By name, then version, with their live workers and open runs."""
        options = self._options

        def op(tx: Tx) -> list[DefinitionRecord]:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            since = _live_since(tx, options)
            definitions = tx.all(
                "SELECT name, version, fingerprint, registered_at_ms, removed_at_ms "
                "FROM definitions WHERE namespace = ? ORDER BY name, version",
                (namespace,),
            )
            counts = {
                (row["name"], row["version"]): row
                for row in tx.all(
                    _RUN_COUNTS + " GROUP BY r.workflow_type, r.workflow_version",
                    (now, now, now, now, namespace),
                )
            }
            live = _live_workers(tx, namespace, since)
            return [
                _record(
                    d,
                    live.get((d["name"], d["version"]), []),
                    counts.get((d["name"], d["version"])),
                )
                for d in definitions
            ]

        return await self._read(op)

    async def remove_definition(self, namespace: str, name: str, version: str) -> DefinitionRecord:
        """DefinitionInUseError while a live worker registers it or an open run references
        it; NotFoundError if never registered. Idempotent; one transaction."""
        require(name, "name")
        version = version_or_default(version)
        options = self._options

        def op(tx: Tx) -> DefinitionRecord:
            require_namespace(tx, namespace)
            # The row lock registration takes too (see the module's docstring).
            definition = _locked_definition(tx, namespace, name, version)
            record = _describe(tx, _live_since(tx, options), namespace, definition)
            if record.live_worker_ids or record.open_runs:
                raise DefinitionInUseError(_in_use_message(record))
            if definition["removed_at_ms"] is not None:
                return record  # idempotent: the first removal's time stays
            now = tx.now_ms()
            tx.run(
                "UPDATE definitions SET removed_at_ms = ? "
                "WHERE namespace = ? AND name = ? AND version = ?",
                (now, namespace, name, version),
            )
            return replace(record, removed_at_ms=now)

        return await self._write(op)

    async def restore_definition(self, namespace: str, name: str, version: str) -> DefinitionRecord:
        """Undoes remove_definition (idempotent); NotFoundError if never registered."""
        require(name, "name")
        version = version_or_default(version)
        options = self._options

        def op(tx: Tx) -> DefinitionRecord:
            require_namespace(tx, namespace)
            definition = _locked_definition(tx, namespace, name, version)
            if definition["removed_at_ms"] is not None:
                tx.run(
                    "UPDATE definitions SET removed_at_ms = NULL "
                    "WHERE namespace = ? AND name = ? AND version = ?",
                    (namespace, name, version),
                )
            restored = {**definition, "removed_at_ms": None}
            return _describe(tx, _live_since(tx, options), namespace, restored)

        return await self._write(op)


def _locked_definition(tx: Tx, namespace: str, name: str, version: str) -> Row:
    definition = tx.one(
        "SELECT name, version, fingerprint, registered_at_ms, removed_at_ms FROM definitions "
        f"WHERE namespace = ? AND name = ? AND version = ?{tx.row_lock_suffix}",
        (namespace, name, version),
    )
    if definition is None:
        raise NotFoundError(
            f"workflow ({name!r}, version {version!r}) was never registered in namespace "
            f"{namespace!r}"
        )
    return definition
