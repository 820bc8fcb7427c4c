"""The time skipper: jumps the store's clock whenever every remaining task waits on time.

It polls the store (a few index probes on the in-memory database every few ms) rather
than reacting to notifications: "nothing queued or leased" is a property of the whole
store, and an atomic check-and-jump on the store's writer thread (``skip_time``) is what
makes it safe, not the moment the check happens. After a jump the server's due loop is
told to run at once, so timers fire, backoffs end and pollers wake. A schedule with
something to start (a due slot, a buffered start whose run closed) holds the clock until
the schedule loop started it, and wakes that loop (it would otherwise look again only
after its real-time bound), so each firing happens at its own moment of the clock.
"""

from __future__ import annotations

import asyncio
import contextlib

from durable_rpc.server import Server
from durable_rpc.store import SQLiteStore

#: How often the skipper looks for an idle store. Small: it bounds the latency of each
#: skipped timer, and a probe is a few index lookups on an in-memory database.
POLL_S = 0.005


class TimeSkipper:
    def __init__(self, server: Server, store: SQLiteStore) -> None:
        self._server = server
        self._store = store
        self._task: asyncio.Task[None] | None = None
        #: Skip automatically; tests turn it off to interleave signals with timers.
        self.auto = True

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="durable-rpc-time-skipper")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def skip_once(self, until_ms: int | None = None) -> tuple[bool, int]:
        """One attempt: (idle, database time after). Wakes the due loop after a jump."""
        report = await self._store.skip_time(until_ms)
        if report.skipped_ms > 0 or report.schedule_due:
            self._server.process_due_now()
        return report.idle, report.db_now_ms

    async def advance(self, ms: int) -> None:
        """Move the clock ``ms`` forward, firing what comes due on the way, in order.

        Jumps only while nothing is queued or leased; while something runs, real time
        passes instead (a running activity's lease is never expired by a jump).
        """
        target = await self._store.now_ms() + ms
        while True:
            _, now = await self.skip_once(target)
            if now >= target:
                return
            await asyncio.sleep(POLL_S)

    async def _run(self) -> None:
        while True:
            if self.auto:
                await self.skip_once()
            await asyncio.sleep(POLL_S)
