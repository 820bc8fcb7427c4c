"""Retention: closed runs past their namespace's retention are deleted with every row of
them, and the cluster-wide lease that lets one replica at a time do it.

A run is judged alone by its own close time: a continued-as-new chain loses its oldest
runs first, and a child outlives or predates its parent as its own close time says (the
links between runs, ``parent_run_id`` and ``redriven_from_run_id``, only refer: a run
whose linked run is gone behaves as when that run is closed).

Workers whose last heartbeat is older than their namespace's retention (a process that
died without deregistering) are deleted with their registrations by the same sweep
(:meth:`_RetentionOps.delete_gone_workers`), so ``ListWorkers --all`` does not grow
forever.

What is deleted with a run: its row in ``runs`` and its rows in every per-run table
(:data:`RUN_TABLES`). ``queries`` rows are not per-run state: each expires by its own
``expires_at_ms`` (a query's timeout) and is deleted by ``process_due``.
"""

from __future__ import annotations

from durable_rpc.errors import InvalidArgumentError, LeaseLostError
from durable_rpc.store._admin_records import RetentionBatch
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._shared import require
from durable_rpc.store._tx import Row, Tx

#: The maintenance lease of the retention sweep.
RETENTION_JOB = "retention"

#: The tables holding rows of one run, keyed by (namespace, run_id) (each has an index
#: with that prefix). ``start_requests`` is keyed by workflow id, deleted apart.
#: ``payload_refs``: the payloads the run's history references; a payload left with no
#: ref is deleted by :meth:`_PayloadOps.delete_unreferenced_payloads` after its grace.
RUN_TABLES = (
    "history",
    "tasks",
    "signal_requests",
    "search_attributes",
    "update_requests",
    "payload_refs",
    # Released when the run closes (store/_budgets); listed so a leftover never outlives it.
    "budget_reservations",
    # A run's own worker session ("run:" + its id); a named one has no run_id.
    "worker_sessions",
    # A run's message streams and the reads of its code waiting on them (store/_streams).
    "stream_items",
    "stream_reads",
)

#: A worker's rows, keyed by (namespace, worker_id); ``workers`` last.
WORKER_TABLES = (
    "worker_definitions",
    "worker_activities",
    "worker_session_config",
    "workers",
)


class _RetentionOps(_SqlOpsBase):
    async def take_maintenance_lease(self, job: str, owner: str, ttl_ms: int) -> bool:
        """Take, renew or take over (once expired, by the database clock) the lease of a
        cluster-wide background job for ``ttl_ms``; False while another owner holds it."""
        require(job, "job")
        require(owner, "owner")
        if ttl_ms <= 0:
            raise InvalidArgumentError("ttl_ms must be positive")

        def op(tx: Tx) -> bool:
            now = tx.now_ms()
            # Taken when free, renewed by its holder, taken over once expired (database
            # clock): one statement, so two replicas racing for it cannot both win.
            changed = tx.run(
                "INSERT INTO maintenance_leases (job, owner, expires_at_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (job) DO UPDATE SET owner = excluded.owner, "
                "expires_at_ms = excluded.expires_at_ms "
                "WHERE maintenance_leases.owner = excluded.owner "
                "OR maintenance_leases.expires_at_ms <= ?",
                (job, owner, now + ttl_ms, now),
            )
            return changed > 0

        return await self._write(op)

    async def release_maintenance_lease(self, job: str, owner: str) -> None:
        """Give the lease up (if ``owner`` holds it), so another replica need not wait."""

        def op(tx: Tx) -> None:
            tx.run("DELETE FROM maintenance_leases WHERE job = ? AND owner = ?", (job, owner))

        await self._write(op)

    async def delete_expired_runs(self, owner: str, limit: int, max_events: int) -> RetentionBatch:
        """Delete up to ``limit`` closed runs whose close time is older than their
        namespace's retention, with every row of them, in one transaction holding at most
        ``max_events`` of their history events (a longer history goes over several,
        newest events first, the run with the last). Fenced by the 'retention'
        maintenance lease: LEASE_LOST unless ``owner`` holds it unexpired."""
        if limit <= 0 or max_events <= 0:
            raise InvalidArgumentError("limit and max_events must be positive")

        def op(tx: Tx) -> RetentionBatch:
            now = tx.now_ms()
            hold_retention_lease(tx, owner, now)
            deleted = events = 0
            for namespace in tx.all("SELECT name, retention_ms FROM namespaces ORDER BY name"):
                if deleted >= limit or events >= max_events:
                    return RetentionBatch(deleted, more=True)
                runs = _expired(tx, namespace, now, limit - deleted)
                taken: list[Row] = []
                for run in runs:
                    length = int(run["history_length"])
                    if events + length > max_events:
                        if not taken and not deleted and not events:
                            # One run's history alone is over the budget: its newest
                            # events go now, the run when the rest fits a batch.
                            _trim_history(tx, namespace["name"], run, max_events)
                            events = max_events
                        break
                    taken.append(run)
                    events += length
                _delete_runs(tx, namespace["name"], taken)
                deleted += len(taken)
                if len(taken) < len(runs):
                    return RetentionBatch(deleted, more=True)
            return RetentionBatch(deleted, more=deleted >= limit)

        return await self._write(op)

    async def delete_gone_workers(self, owner: str, limit: int) -> int:
        """Delete up to ``limit`` workers whose last heartbeat is older than their
        namespace's retention, with their registered definitions and activities, in one
        transaction; the count. Fenced like :meth:`delete_expired_runs`."""
        if limit <= 0:
            raise InvalidArgumentError("limit must be positive")

        def op(tx: Tx) -> int:
            now = tx.now_ms()
            hold_retention_lease(tx, owner, now)
            deleted = 0
            for namespace in tx.all("SELECT name, retention_ms FROM namespaces ORDER BY name"):
                name = namespace["name"]
                gone = [
                    row["worker_id"]
                    for row in tx.all(
                        "SELECT worker_id FROM workers WHERE namespace = ? "
                        "AND last_heartbeat_ms < ? ORDER BY last_heartbeat_ms LIMIT ?",
                        (name, now - int(namespace["retention_ms"]), limit - deleted),
                    )
                ]
                if not gone:
                    continue
                marks = ", ".join("?" for _ in gone)
                for table in WORKER_TABLES:
                    tx.run(
                        f"DELETE FROM {table} WHERE namespace = ? AND worker_id IN ({marks})",
                        (name, *gone),
                    )
                deleted += len(gone)
                if deleted >= limit:
                    break
            return deleted

        return await self._write(op)


def hold_retention_lease(tx: Tx, owner: str, now: int) -> None:
    """Fences a retention transaction: only the holder of the unexpired lease deletes
    (on PostgreSQL the row stays locked to the commit, so a take-over waits for it)."""
    held = tx.one(
        "SELECT owner FROM maintenance_leases WHERE job = ? AND owner = ? "
        f"AND expires_at_ms > ?{tx.row_lock_suffix}",
        (RETENTION_JOB, owner, now),
    )
    if held is None:
        raise LeaseLostError(f"the {RETENTION_JOB!r} maintenance lease is not held")


def _expired(tx: Tx, namespace: Row, now: int, limit: int) -> list[Row]:
    """The namespace's oldest closed runs past its retention (index ``runs_closed``)."""
    return tx.all(
        "SELECT run_id, workflow_id, history_length FROM runs WHERE namespace = ? "
        "AND close_time_ms IS NOT NULL AND close_time_ms < ? ORDER BY close_time_ms LIMIT ?",
        (namespace["name"], now - int(namespace["retention_ms"]), limit),
    )


def _trim_history(tx: Tx, namespace: str, run: Row, count: int) -> None:
    """Deletes the newest ``count`` events of an expired run and shortens its recorded
    length to match, so the next batch sees what is left (a sweep that stops halfway
    leaves a consistent, shorter run that the next sweep finishes)."""
    keep = int(run["history_length"]) - count
    tx.run(
        "DELETE FROM history WHERE namespace = ? AND run_id = ? AND event_id > ?",
        (namespace, run["run_id"], keep),
    )
    tx.run(
        "UPDATE runs SET history_length = ? WHERE namespace = ? AND run_id = ?",
        (keep, namespace, run["run_id"]),
    )


def _delete_runs(tx: Tx, namespace: str, runs: list[Row]) -> None:
    if not runs:
        return
    run_ids = [row["run_id"] for row in runs]
    workflow_ids = sorted({row["workflow_id"] for row in runs})
    marks = ", ".join("?" for _ in run_ids)
    for table in RUN_TABLES:
        tx.run(
            f"DELETE FROM {table} WHERE namespace = ? AND run_id IN ({marks})",
            (namespace, *run_ids),
        )
    # By the primary key's (namespace, workflow_id) prefix; the run id picks the rows.
    tx.run(
        "DELETE FROM start_requests WHERE namespace = ? "
        f"AND workflow_id IN ({', '.join('?' for _ in workflow_ids)}) AND run_id IN ({marks})",
        (namespace, *workflow_ids, *run_ids),
    )
    tx.run(f"DELETE FROM runs WHERE namespace = ? AND run_id IN ({marks})", (namespace, *run_ids))
