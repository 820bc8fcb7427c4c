"""The counts behind the server's metric gauges: durable waits pending, runs whose
definition no live worker registers and budget reservations waiting. Read on the
server's refresh (a few seconds apart), never per scrape or per call."""

from __future__ import annotations

from durable_rpc.store._admin_records import MetricCounts
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._tx import Tx


class _MetricOps(_SqlOpsBase):
    async def metric_counts(self) -> MetricCounts:
        """Waiting tasks by kind and definition-unavailable runs by queue: indexed counts
        for the server's gauges, read every few seconds while metrics are exported."""
        live_since_offset = self._options.worker_liveness_ms

        def op(tx: Tx) -> MetricCounts:
            # An index-only count of tasks_due (kind, state, due_ms): every waiting task
            # has a due time (its timer, its backoff's end). No namespace: that would read
            # every waiting row.
            waiting = {
                row["kind"]: int(row["n"])
                for row in tx.all(
                    "SELECT kind, count(*) AS n FROM tasks "
                    "WHERE kind IN ('timer', 'activity', 'workflow') AND state = 'waiting' "
                    "AND due_ms IS NOT NULL GROUP BY kind"
                )
            }
            # Queued workflow tasks (tasks_due again) grouped by definition and build pin
            # first, so the liveness probe runs once per (queue, definition, build), not
            # once per run. A pinned task counts as served only by a live worker of its
            # build: the claim's rule (_ops_leases.SERVED_BY_WORKER), as describe uses it.
            unavailable = {
                (row["namespace"], row["task_queue"]): int(row["n"])
                for row in tx.all(
                    "SELECT g.namespace, g.task_queue, sum(g.n) AS n FROM ("
                    "SELECT namespace, task_queue, workflow_type, workflow_version, build_id, "
                    "count(*) AS n FROM tasks WHERE kind = 'workflow' AND state = 'queued' "
                    "AND due_ms IS NOT NULL "
                    "GROUP BY namespace, task_queue, workflow_type, workflow_version, "
                    "build_id) g "
                    "WHERE NOT EXISTS (SELECT 1 FROM worker_definitions wd JOIN workers w "
                    "ON w.namespace = wd.namespace AND w.worker_id = wd.worker_id "
                    "WHERE wd.namespace = g.namespace AND wd.name = g.workflow_type "
                    "AND wd.version = g.workflow_version AND w.task_queue = g.task_queue "
                    "AND w.last_heartbeat_ms >= ? "
                    "AND (g.build_id IS NULL OR w.build_id = g.build_id)) "
                    "GROUP BY g.namespace, g.task_queue",
                    (tx.now_ms() - live_since_offset,),
                )
            }
            # Only waiting rows: an index range of budget_reservations_by_budget per
            # budget, empty without budgets.
            budget_waiting = {
                (row["namespace"], row["budget"]): int(row["n"])
                for row in tx.all(
                    "SELECT namespace, budget, count(*) AS n FROM budget_reservations "
                    "WHERE state = 'waiting' GROUP BY namespace, budget"
                )
            }
            return MetricCounts(
                waiting=waiting,
                definition_unavailable=unavailable,
                budget_waiting=budget_waiting,
            )

        return await self._read(op)
