"""The schedule loop: fires schedules when they come due (``Store.fire_schedules``).

The store decides what is due by its own clock and fences each firing, so any number of
replicas may run this loop; the process clock only decides when to look. The loop
sleeps until the earliest due slot the store reported, at most ``MAX_SLEEP_S`` (what a
schedule created on another replica waits at most before this one sees it), and is
woken early by a change made through this server (``wake``) and by the close of a run
that buffered due times wait for (``run_closed``, from the server's notifier: closes on
any replica reach it on PostgreSQL), so a buffered start follows the close at once.
"""

from __future__ import annotations

import asyncio
import logging
import time

from durable_rpc._tasks import STOP_TIMEOUT_S, stop_task, wait_event
from durable_rpc.errors import DurableRpcError
from durable_rpc.store import Store

log = logging.getLogger(__name__)

MAX_SLEEP_S = 5.0
ERROR_SLEEP_S = 0.5
# A firing comes at most this much after its due time (by the database clock).
GRANULARITY_S = 0.01


class ScheduleLoop:
    def __init__(self, store: Store, max_sleep_s: float = MAX_SLEEP_S) -> None:
        self._store = store
        self._max_sleep_s = max_sleep_s
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: The open runs the last pass found buffered due times waiting for.
        self._waiting_on: frozenset[tuple[str, str]] = frozenset()

    def wake(self) -> None:
        """A schedule was created, updated or unpaused here (or the clock skipped)."""
        self._changed.set()

    @property
    def waiting_on(self) -> frozenset[tuple[str, str]]:
        """The open runs the last pass found buffered due times waiting for."""
        return self._waiting_on

    def run_closed(self, namespace: str, run_id: str) -> None:
        """A run closed (on the event loop): look again if due times wait for it. A set
        lookup: every run's close comes here."""
        if (namespace, run_id) in self._waiting_on:
            self._changed.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="durable-rpc-schedule-loop")

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        await stop_task(self._task, timeout)
        self._task = None

    async def _run(self) -> None:
        while True:
            self._changed.clear()
            try:
                firing = await self._store.fire_schedules()
            except DurableRpcError as exc:
                log.warning("firing schedules failed: %s", exc)
                await asyncio.sleep(ERROR_SLEEP_S)
                continue
            self._waiting_on = firing.waiting_on
            delay = self._max_sleep_s
            if firing.next_fire_ms is not None:
                until = max(0.0, (firing.next_fire_ms - firing.db_now_ms) / 1000)
                delay = min(self._max_sleep_s, until + GRANULARITY_S)
            started = time.monotonic()
            await wait_event(self._changed, delay)
            log.debug("schedule loop slept %.3fs", time.monotonic() - started)
