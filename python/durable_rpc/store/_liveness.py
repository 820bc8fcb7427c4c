"""Which workers count as live: the one rule behind describe's definition_available,
ListWorkers' ``live``, DescribeTaskQueue's pollers and the stuck reason; and whether a
live worker serves a run's definition.

A worker is live while its last heartbeat (or registration) is within
``StoreOptions.worker_liveness_ms`` of the database clock; a worker that deregistered
has no row at all.
"""

from __future__ import annotations

from durable_rpc.store._options import StoreOptions
from durable_rpc.store._tx import Row, Tx

#: The condition on ``workers w``; its parameter is :func:`live_since`.
LIVE_WORKER = "w.last_heartbeat_ms >= ?"


def live_since(tx: Tx, options: StoreOptions) -> int:
    """The oldest heartbeat (database time, ms) that still counts as live."""
    return tx.now_ms() - options.worker_liveness_ms


def definition_served(tx: Tx, options: StoreOptions, namespace: str, run: Row) -> bool:
    """Whether a live worker of ``run``'s task queue registers its definition (name,
    version) -- of its build, when the run is pinned to one: the workers a claim would
    hand its workflow tasks to (``_ops_leases.SERVED_BY_WORKER``), so describe never calls
    a pinned run available while only other builds are deployed."""
    pin = run["build_id"]  # NULL undecided, '' unversioned: any build serves it
    of_build = " AND w.build_id = ?" if pin else ""
    row = tx.one(
        "SELECT 1 AS live FROM worker_definitions wd JOIN workers w "
        "ON w.namespace = wd.namespace AND w.worker_id = wd.worker_id "
        "WHERE wd.namespace = ? AND wd.name = ? AND wd.version = ? "
        f"AND w.task_queue = ? AND {LIVE_WORKER}{of_build} LIMIT 1",
        (
            namespace,
            run["workflow_type"],
            run["workflow_version"],
            run["task_queue"],
            live_since(tx, options),
            *((pin,) if pin else ()),
        ),
    )
    return row is not None
