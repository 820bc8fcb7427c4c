"""Which workers count as live: the one rule behind describe's definition_available,
ListWorkers' ``live``, DescribeTaskQueue's pollers and the stuck reason.

A worker is live while its last heartbeat (or registration) is within
``StoreOptions.worker_liveness_ms`` of the database clock; a worker that deregistered
has no row at all.
"""

from __future__ import annotations

from durable_rpc.store._api import StoreOptions
from durable_rpc.store._tx import Tx

#: The condition on ``workers w``; its parameter is :func:`live_since`.
LIVE_WORKER = "w.last_heartbeat_ms >= ?"


def live_since(tx: Tx, options: StoreOptions) -> int:
    """The oldest heartbeat (database time, ms) that still counts as live."""
    return tx.now_ms() - options.worker_liveness_ms
