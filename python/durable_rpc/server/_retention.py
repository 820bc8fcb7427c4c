"""The retention loop: deletes closed runs past their namespace's retention, once
cluster-wide.

Every ``interval_s`` the loop takes (or renews) the 'retention' maintenance lease; the
replica holding it sweeps, the others wait for their next turn. The lease outlives
several intervals, so its holder keeps it from sweep to sweep and a replica that died
holding it is replaced once it expires (database clock). A sweep is a series of bounded
transactions (``batch`` runs and ``max_events`` history events at most each, every
one fenced by the lease in the store); between
two, the loop pauses as long as the last one took, so the sweep holds the store (on
SQLite: the single writer) at most half the time and the hot path's writes go between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

from durable_rpc._tasks import STOP_TIMEOUT_S, stop_task
from durable_rpc.errors import DurableRpcError, LeaseLostError
from durable_rpc.store import Store

log = logging.getLogger(__name__)

JOB = "retention"
DEFAULT_INTERVAL_S = 300.0
#: A transaction deletes at most this many runs and this many of their history events
#: (a longer history goes over several). bench/retention_batch.py: on SQLite a batch holds
#: the one writer ~10-20 us an event: runs of 10 events, 500 a batch, ~85 ms (a concurrent
#: write waited up to 170 ms), 100 a batch ~21 ms; runs of 200 events, 100 a batch,
#: 270-450 ms, against 16-32 ms p50 with 1,000 events a batch (a concurrent write's p99
#: 26 ms against 292 ms, in one window). PostgreSQL takes row locks only
#: (500 runs of 10 events ~37 ms, other writers unaffected). 100 runs and 1,000 events keep
#: SQLite's stall near one group commit's.
DEFAULT_BATCH = 100
DEFAULT_MAX_EVENTS = 1_000
#: A stored payload no run references outlives its last upload by this much (an upload
#: is followed by the request that references it; a slow client gets an hour).
DEFAULT_PAYLOAD_GRACE_S = 3600.0
#: The lease outlives this many intervals (and at least the floor below): its holder
#: renews it every interval; another replica takes over only after it expired.
LEASE_INTERVALS = 3
MIN_LEASE_S = 30.0
#: Shortest pause between two batches of a sweep.
MIN_PAUSE_S = 0.01


def replica_id() -> str:
    """This process among the replicas (host, pid and a random part: pids repeat)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class RetentionLoop:
    def __init__(
        self,
        store: Store,
        interval_s: float = DEFAULT_INTERVAL_S,
        batch: int = DEFAULT_BATCH,
        owner: str | None = None,
        max_events: int = DEFAULT_MAX_EVENTS,
        payload_grace_ms: int = int(DEFAULT_PAYLOAD_GRACE_S * 1000),
    ) -> None:
        if interval_s <= 0:
            raise ValueError("the retention interval must be positive")
        if batch <= 0 or max_events <= 0:
            raise ValueError("the retention batch must be positive")
        self._store = store
        self._interval_s = interval_s
        self._batch = batch
        self._max_events = max_events
        self._payload_grace_ms = payload_grace_ms
        self.owner = owner or replica_id()
        self._lease_ms = int(max(MIN_LEASE_S, LEASE_INTERVALS * interval_s) * 1000)
        self._task: asyncio.Task[None] | None = None
        #: Runs this replica deleted since it started (tests and logs).
        self.deleted = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="durable-rpc-retention")

    async def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self._task is None:
            return
        await stop_task(self._task, timeout)
        self._task = None
        # Hand the job over now rather than at the lease's expiry.
        with contextlib.suppress(DurableRpcError):
            await self._store.release_maintenance_lease(JOB, self.owner)

    async def _run(self) -> None:
        while True:
            # The first sweep comes one interval after the start, not at it: a server
            # (re)starting has its own work first, and a replica restarted in a loop would
            # otherwise sweep at every start.
            await asyncio.sleep(self._interval_s)
            try:
                await self.sweep()
            except DurableRpcError as exc:
                log.warning("retention sweep failed: %s", exc)

    async def sweep(self) -> int:
        """One sweep if this replica holds (or can take) the lease; the runs deleted."""
        if not await self._store.take_maintenance_lease(JOB, self.owner, self._lease_ms):
            return 0
        total = 0
        while True:
            began = time.monotonic()
            try:
                batch = await self._store.delete_expired_runs(
                    self.owner, self._batch, self._max_events
                )
            except LeaseLostError:
                log.warning("retention: the lease was taken over mid-sweep; stopping")
                break
            total += batch.deleted
            if not batch.more:
                break
            await asyncio.sleep(max(MIN_PAUSE_S, time.monotonic() - began))
            # A long sweep renews its lease; lost (expired and taken over), it stops.
            if not await self._store.take_maintenance_lease(JOB, self.owner, self._lease_ms):
                break
        if total:
            self.deleted += total
            log.info("retention: deleted %d closed runs past their namespace's retention", total)
        # Workers that died without deregistering, gone longer than the retention (a
        # handful per sweep at most: one bounded transaction).
        with contextlib.suppress(LeaseLostError):
            gone = await self._store.delete_gone_workers(self.owner, self._batch)
            if gone:
                log.info("retention: deleted %d workers silent longer than the retention", gone)
        # Payloads no remaining run references (after the runs: their refs went with
        # them), past their grace period; one bounded transaction per batch.
        with contextlib.suppress(LeaseLostError):
            while (
                dropped := await self._store.delete_unreferenced_payloads(
                    self.owner, self._payload_grace_ms, self._batch
                )
            ) > 0:
                log.info("retention: deleted %d payloads no run references", dropped)
                if dropped < self._batch:
                    break
        return total
