"""grpc.health.v1 follows the store: NOT_SERVING while the store is unusable.

A load balancer asks health to decide where to route; a replica whose database is gone
(SQLite file removed or unwritable, PostgreSQL unreachable) can only answer UNAVAILABLE,
so it must say NOT_SERVING until the store works again. The monitor probes
``Store.check_health()`` every ``interval_s`` and, sooner, when a call just failed with
StoreUnavailableError (``poke``), and flips every served name ("" and each service) on a
change. A probe that does not answer within ``timeout_s`` counts as unusable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from grpc_health.v1 import health_pb2
from grpc_health.v1.health import aio as health_aio

from durable_rpc._tasks import STOP_TIMEOUT_S, stop_task, wait_event
from durable_rpc.errors import DurableRpcError
from durable_rpc.store import Store

log = logging.getLogger("durable_rpc.server.health")

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# A burst of failing calls wakes at most one probe per this many seconds.
MIN_POKE_GAP_S = 0.1


class StoreHealth:
    def __init__(
        self,
        store: Store,
        health: health_aio.HealthServicer,
        names: Sequence[str],
        *,
        interval_s: float,
        timeout_s: float,
        store_name: str,
    ) -> None:
        self._store = store
        self._health = health
        self._names = tuple(names)
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._store_name = store_name
        self._serving = True  # the server sets SERVING once the store has opened
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def serving(self) -> bool:
        return self._serving

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="store-health")

    def poke(self) -> None:
        """A call failed with StoreUnavailableError: probe now (while still SERVING; once
        NOT_SERVING, recovery is found by the regular probe)."""
        if self._serving:
            self._poked.set()

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        await stop_task(self._task, timeout)
        self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            probed_at = loop.time()
            await self.probe()
            self._poked.clear()
            await wait_event(self._poked, self._interval_s)
            gap = MIN_POKE_GAP_S - (loop.time() - probed_at)
            if gap > 0:
                await asyncio.sleep(gap)

    async def probe(self) -> bool:
        """Probes the store once and publishes the result; True when usable."""
        problem: str | None = None
        try:
            async with asyncio.timeout(self._timeout_s):
                await self._store.check_health()
        except TimeoutError:
            problem = f"the store did not answer a health probe within {self._timeout_s:g}s"
        except DurableRpcError as exc:
            problem = exc.message
        except Exception as exc:  # a probe must never end the monitor
            problem = repr(exc)
        serving = problem is None
        if serving != self._serving:
            self._serving = serving
            if serving:
                log.info("store %s is usable again: health SERVING", self._store_name)
            else:
                log.warning(
                    "store %s is unusable (%s): health NOT_SERVING", self._store_name, problem
                )
            status = SERVING if serving else NOT_SERVING
            for name in self._names:
                await self._health.set(name, status)
        return serving
