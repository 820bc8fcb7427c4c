"""The due-time loop: fires timers, retries and lease expiries when they come due.

The Rust `DueIndex` holds the due times the store reported (database-clock ms); the
loop sleeps until the earliest one and then asks the store to process everything due.
The store decides what is actually due by its own clock; the process clock only decides
when to look. A restart re-seeds the index from the store's `next_due_ms`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from durable_rpc._core import DueIndex
from durable_rpc._tasks import STOP_TIMEOUT_S, stop_task, wait_event
from durable_rpc.errors import DurableRpcError
from durable_rpc.server._metrics import ServerMetrics
from durable_rpc.store import Store

log = logging.getLogger(__name__)

# Upper bound on one sleep: a safety net should a due time ever be missed (for
# example a write committed by another process). Indexed lookups make it cheap.
MAX_SLEEP_S = 5.0
# Backoff when the store is unavailable.
ERROR_SLEEP_S = 0.5
# Due times this close together are handled by one pass: under load every claim adds a
# lease expiry, and a pass per millisecond would be a write transaction per millisecond.
# Timers fire at most this much after their due time.
DUE_GRANULARITY_S = 0.01


class DueLoop:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._index = DueIndex()
        self._changed = asyncio.Event()
        self._offset_ms = 0  # database clock minus process clock, refreshed every pass
        self._task: asyncio.Task[None] | None = None
        self._run_now = False
        #: Where expired activity leases are counted (set by a server exporting metrics).
        self.metrics: ServerMetrics | None = None

    def schedule(self, due_ms: int) -> None:
        """A new due time (database clock); wakes the loop if it is the earliest."""
        current = self._index.next_due()
        self._index.schedule(str(due_ms), due_ms)
        if current is None or due_ms < current:
            self._changed.set()

    def run_now(self) -> None:
        """Process due work right away, whatever the index says: the store's clock jumped
        (durable_rpc.testing's time skipping), so the process-clock estimate is stale."""
        self._run_now = True
        self._changed.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="durable-rpc-due-loop")

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        await stop_task(self._task, timeout)
        self._task = None

    def _db_now_estimate(self) -> int:
        return int(time.time() * 1000) + self._offset_ms

    async def _run(self) -> None:
        while True:
            try:
                report = await self._store.process_due()
            except DurableRpcError as exc:
                log.warning("processing due work failed: %s", exc)
                await asyncio.sleep(ERROR_SLEEP_S)
                continue
            if self.metrics is not None and report.expired_activity_attempts:
                self.metrics.record_activity_leases_expired(report.expired_activity_attempts)
            self._offset_ms = report.db_now_ms - int(time.time() * 1000)
            self._index.pop_due(report.db_now_ms)
            if report.next_due_ms is not None:
                self._index.schedule(str(report.next_due_ms), report.next_due_ms)
            # What became claimable (fired timers, ended backoffs, expired leases put back
            # in the queue) was announced by the pass's own notifications.
            await self._sleep_until_next_due()

    async def _sleep_until_next_due(self) -> None:
        while True:
            self._changed.clear()
            if self._run_now:
                self._run_now = False
                return
            next_due = self._index.next_due()
            delay = MAX_SLEEP_S
            if next_due is not None:
                until_due = max(0.0, (next_due - self._db_now_estimate()) / 1000)
                delay = min(MAX_SLEEP_S, until_due + DUE_GRANULARITY_S)
            if not await wait_event(self._changed, delay):
                return
