"""The schedule loop: fires schedules when they come due (``Store.fire_schedules``).

The store decides what is due by its own clock and fences each firing, so any number of
replicas may run this loop; the process clock only decides when to look. The loop
sleeps until the earliest due slot the store reported, at most ``MAX_SLEEP_S`` (what a
schedule created on another replica waits at most before this one sees it), and is
woken early by a change made through this server (``wake``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from durable_rpc.errors import DurableRpcError
from durable_rpc.store import Store

log = logging.getLogger(__name__)

MAX_SLEEP_S = 5.0
ERROR_SLEEP_S = 0.5
# A firing comes at most this much after its due time (by the database clock).
GRANULARITY_S = 0.01


class ScheduleLoop:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        """A schedule was created, updated or unpaused here (or the clock skipped)."""
        self._changed.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="durable-rpc-schedule-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            self._changed.clear()
            try:
                firing = await self._store.fire_schedules()
            except DurableRpcError as exc:
                log.warning("firing schedules failed: %s", exc)
                await asyncio.sleep(ERROR_SLEEP_S)
                continue
            delay = MAX_SLEEP_S
            if firing.next_fire_ms is not None:
                until = max(0.0, (firing.next_fire_ms - firing.db_now_ms) / 1000)
                delay = min(MAX_SLEEP_S, until + GRANULARITY_S)
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=delay)
            log.debug("schedule loop slept %.3fs", time.monotonic() - started)
