"""The fleet as an operator sees it: registered workers with what they report, and a task
queue's backlog, pollers and served definitions (AdminService.ListWorkers and
DescribeTaskQueue). Reads only; each is a fixed number of statements whatever the number
of workers (no query per worker)."""

from __future__ import annotations

import json
from collections import defaultdict

from durable_rpc.store._fleet_records import (
    QueueBacklog,
    ServedDefinition,
    TaskQueueDescription,
    TaskQueueSummary,
    WorkerCounters,
    WorkerRecord,
)
from durable_rpc.store._liveness import LIVE_WORKER, live_since
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._ops_rate_limits import rate_limits_of
from durable_rpc.store._queue_limits import activities_in_use
from durable_rpc.store._shared import ACTIVE, require, require_namespace
from durable_rpc.store._tx import Row, Tx

#: The backlog's kinds, in the order DescribeTaskQueue lists them (timers are not work
#: a worker claims).
BACKLOG_KINDS = ("workflow", "activity")


class _FleetOps(_SqlOpsBase):
    """ListWorkers and DescribeTaskQueue."""

    async def list_workers(
        self, namespace: str, task_queue: str | None, include_dead: bool
    ) -> list[WorkerRecord]:
        """By task queue, then worker id; live ones only unless ``include_dead``."""

        def op(tx: Tx) -> list[WorkerRecord]:
            require_namespace(tx, namespace)
            return _workers(tx, namespace, task_queue, live_since(tx, self._options), include_dead)

        return await self._read(op)

    async def describe_task_queue(self, namespace: str, task_queue: str) -> TaskQueueDescription:
        """Backlog by kind, live workers (pollers) and what they serve."""
        require(task_queue, "task_queue")

        def op(tx: Tx) -> TaskQueueDescription:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            pollers = _workers(
                tx, namespace, task_queue, live_since(tx, self._options), include_dead=False
            )
            limit = tx.value(
                "SELECT max_concurrent_activities FROM task_queue_limits "
                "WHERE namespace = ? AND task_queue = ?",
                (namespace, task_queue),
            )
            return TaskQueueDescription(
                task_queue=task_queue,
                now_ms=now,
                backlog=_backlog(tx, namespace, task_queue, now),
                pollers=tuple(pollers),
                definitions=_served(pollers),
                max_concurrent_activities=None if limit is None else int(limit),
                activities_in_use=activities_in_use(tx, namespace, task_queue),
                rate_limits=tuple(rate_limits_of(tx, namespace)),
            )

        return await self._read(op)

    async def list_task_queues(
        self, namespace: str, limit: int = 1000
    ) -> tuple[list[TaskQueueSummary], bool]:
        """Every queue with an open task or a registered worker, by name, the first
        ``limit``; and whether there were more."""

        def op(tx: Tx) -> tuple[list[TaskQueueSummary], bool]:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # Two grouped reads, whatever the number of queues: the open tasks (over
            # tasks_claim, as _backlog counts them) and the registered workers.
            visible = f"state IN ('queued', 'waiting') AND due_ms <= {now}"
            tasks = tx.all(
                "SELECT task_queue, kind, COUNT(*) AS open, "
                f"SUM(CASE WHEN {visible} THEN 1 ELSE 0 END) AS queued, "
                f"MIN(CASE WHEN {visible} THEN due_ms END) AS oldest "
                "FROM tasks WHERE namespace = ? AND kind IN ('workflow', 'activity') "
                f"AND due_ms IS NOT NULL AND state IN {ACTIVE} GROUP BY task_queue, kind",
                (namespace,),
            )
            workers = tx.all(
                "SELECT w.task_queue, COUNT(*) AS n, "
                f"SUM(CASE WHEN {LIVE_WORKER} THEN 1 ELSE 0 END) AS live "
                "FROM workers w WHERE w.namespace = ? GROUP BY w.task_queue",
                (live_since(tx, self._options), namespace),
            )
            queued: dict[tuple[str, str], int] = {}
            open_tasks: dict[str, int] = defaultdict(int)
            oldest: dict[str, int] = {}
            for row in tasks:
                name = row["task_queue"]
                queued[(name, row["kind"])] = int(row["queued"] or 0)
                open_tasks[name] += int(row["open"])
                if row["oldest"] is not None:
                    first = int(row["oldest"])
                    oldest[name] = min(oldest.get(name, first), first)
            fleet = {row["task_queue"]: (int(row["n"]), int(row["live"] or 0)) for row in workers}
            names = sorted(set(open_tasks) | set(fleet))
            return [
                TaskQueueSummary(
                    task_queue=name,
                    workflow_queued=queued.get((name, "workflow"), 0),
                    activity_queued=queued.get((name, "activity"), 0),
                    open_tasks=open_tasks.get(name, 0),
                    oldest_queued_at_ms=oldest.get(name),
                    workers=fleet.get(name, (0, 0))[0],
                    live_workers=fleet.get(name, (0, 0))[1],
                )
                for name in names[:limit]
            ], len(names) > limit

        return await self._read(op)


def _workers(
    tx: Tx, namespace: str, task_queue: str | None, since: int, include_dead: bool
) -> list[WorkerRecord]:
    """The workers of ``namespace`` (of one queue, live only unless ``include_dead``) by
    queue then id, with their definitions: two statements for any number of workers."""
    where = "w.namespace = ?"
    params: list[object] = [namespace]
    if task_queue:
        where += " AND w.task_queue = ?"
        params.append(task_queue)
    if not include_dead:
        where += f" AND {LIVE_WORKER}"
        params.append(since)
    rows = tx.all(
        "SELECT w.worker_id, w.task_queue, w.build_id, w.activities, w.registered_at_ms, "
        "w.last_heartbeat_ms, w.claims, w.completions, w.failures, w.lease_losses, "
        f"w.slots_in_use, w.slots_total FROM workers w WHERE {where} "
        "ORDER BY w.task_queue, w.worker_id",
        params,
    )
    if not rows:
        return []
    # The fingerprint is the definition's current one (a worker registering other code
    # under the same (name, version) replaced it, or was refused).
    definitions: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for row in tx.all(
        "SELECT wd.worker_id, wd.name, wd.version, d.fingerprint FROM workers w "
        "JOIN worker_definitions wd ON wd.namespace = w.namespace "
        "AND wd.worker_id = w.worker_id "
        "LEFT JOIN definitions d ON d.namespace = wd.namespace AND d.name = wd.name "
        f"AND d.version = wd.version WHERE {where} "
        "ORDER BY wd.worker_id, wd.name, wd.version",
        params,
    ):
        definitions[row["worker_id"]].append(
            (row["name"], row["version"], row["fingerprint"] or "")
        )
    return [_worker(row, definitions[row["worker_id"]], since) for row in rows]


def _worker(row: Row, definitions: list[tuple[str, str, str]], since: int) -> WorkerRecord:
    return WorkerRecord(
        worker_id=row["worker_id"],
        task_queue=row["task_queue"],
        build_id=row["build_id"],
        definitions=tuple(definitions),
        activities=tuple(json.loads(row["activities"])),
        registered_at_ms=row["registered_at_ms"],
        last_heartbeat_ms=row["last_heartbeat_ms"],
        live=row["last_heartbeat_ms"] >= since,
        counters=WorkerCounters(
            claims=row["claims"],
            completions=row["completions"],
            failures=row["failures"],
            lease_losses=row["lease_losses"],
            slots_in_use=row["slots_in_use"],
            slots_total=row["slots_total"],
        ),
    )


def _backlog(tx: Tx, namespace: str, task_queue: str, now: int) -> tuple[QueueBacklog, ...]:
    """The queue's open tasks by kind and state, in one statement over ``tasks_claim``
    (every open task has a ``due_ms``: when it becomes visible, or its lease expires).

    A queued or waiting task whose ``due_ms`` has come is claimable now (a backoff that
    ended before the due pass ran is claimed all the same): queued since ``due_ms``.
    """
    visible = f"state IN ('queued', 'waiting') AND due_ms <= {now}"
    rows = tx.all(
        "SELECT kind, "
        f"SUM(CASE WHEN {visible} THEN 1 ELSE 0 END) AS queued, "
        f"SUM(CASE WHEN state = 'leased' AND expires_at_ms > {now} THEN 1 ELSE 0 END) "
        "AS leased, "
        f"SUM(CASE WHEN state IN ('queued', 'waiting') AND due_ms > {now} THEN 1 ELSE 0 END) "
        "AS waiting, "
        f"SUM(CASE WHEN state = 'leased' AND expires_at_ms <= {now} THEN 1 ELSE 0 END) "
        "AS recoverable, "
        f"MIN(CASE WHEN {visible} THEN due_ms END) AS oldest "
        "FROM tasks WHERE namespace = ? AND kind IN ('workflow', 'activity') "
        f"AND task_queue = ? AND due_ms IS NOT NULL AND state IN {ACTIVE} GROUP BY kind",
        (namespace, task_queue),
    )
    by_kind = {row["kind"]: row for row in rows}
    # By priority: one range of tasks_ready per kind, in its order (no sort).
    priorities: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for counted in tx.all(
        "SELECT kind, priority, count(*) AS n FROM tasks WHERE namespace = ? "
        "AND kind IN ('workflow', 'activity') AND task_queue = ? AND state = 'queued' "
        "GROUP BY kind, priority ORDER BY kind, priority",
        (namespace, task_queue),
    ):
        priorities[counted["kind"]].append((int(counted["priority"]), int(counted["n"])))
    out = []
    for kind in BACKLOG_KINDS:
        row = by_kind.get(kind)
        out.append(
            QueueBacklog(
                kind=kind,
                queued=int(row["queued"] or 0) if row else 0,
                leased=int(row["leased"] or 0) if row else 0,
                waiting=int(row["waiting"] or 0) if row else 0,
                recoverable=int(row["recoverable"] or 0) if row else 0,
                oldest_queued_at_ms=(
                    int(row["oldest"]) if row is not None and row["oldest"] is not None else None
                ),
                queued_by_priority=tuple(priorities.get(kind, ())),
            )
        )
    return tuple(out)


def _served(pollers: list[WorkerRecord]) -> tuple[ServedDefinition, ...]:
    """The definitions the live workers of a queue register, with their builds."""
    builds: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for worker in pollers:
        for definition in worker.definitions:
            builds[definition].add(worker.build_id)
            counts[definition] += 1
    return tuple(
        ServedDefinition(
            name=name,
            version=version,
            fingerprint=fingerprint,
            build_ids=tuple(sorted(builds[(name, version, fingerprint)])),
            live_workers=counts[(name, version, fingerprint)],
        )
        for name, version, fingerprint in sorted(builds)
    )
