"""Live workflow instances kept between a run's workflow tasks (sticky execution).

A cold workflow task replays the run's whole history: O(history) per task, so a run
with thousands of events pays for all of them at every signal. A worker instead keeps,
for the runs it decided last, the suspended :class:`WorkflowInstance` with the replay
machine that drove it; the run's next task on this worker hands the machine only the
events after the ones it knows (``ReplayMachine.continue_with``) and the instance
applies just those.

Correctness never depends on the cache: ``continue_with`` accepts the new events only
when their first workflow task records exactly the decision this worker sent (the
events it saw, its workflow time, its commands); anything else -- another worker took
the task over meanwhile, the decision was not recorded, events are missing -- is a
divergence and the task is replayed cold from event 1. A run leaves the cache when a
task of it starts (it is put back only after the server accepted the decision), when
a task fails or its lease is lost, when it closes (through an ordinary or an inline
decision), when a bound of the worker's ``StickyCacheOptions`` evicts it (least recently
used past ``max_entries`` or ``max_history_bytes``, or ``ttl`` after it was put; see
``_sticky_cache.py``), and when the worker stops. A run closed by anything else
(terminated, timed out) leaves by those bounds.

An entry accounts for the encoded bytes of the history events its machine consumed,
measured from the bytes the task's replay was handed anyway (the whole history when
cold, the new events when continued): nothing is serialized for the count.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from durable_rpc import _core
from durable_rpc.worker._sticky_cache import BoundedCache, StickyCacheMetrics, StickyCacheOptions
from durable_rpc.workflow._runtime import WorkflowInstance

StickyResult = Literal["hit", "miss", "diverged"]


@dataclass(slots=True)
class LiveRun:
    """A suspended workflow instance and the machine that replayed it."""

    machine: _core.ReplayMachine
    instance: WorkflowInstance
    #: Events 1..known are the machine's.
    known: int
    #: The ActivationCompletion (bytes) of the commands the last task sent.
    sent: bytes = b""
    #: The encoded size of events 1..known (what the entry accounts for).
    history_bytes: int = 0


def _abandon(run: LiveRun) -> None:
    run.instance.loop.abandon()


class LiveRuns:
    """The live instances of the runs this worker decided last, by run id, within the
    worker's sticky cache bounds, with the counters of ``Worker.sticky_cache_metrics()``."""

    def __init__(
        self, options: StickyCacheOptions, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._runs: BoundedCache[LiveRun] = BoundedCache(options, _abandon, clock)
        self.hits = 0
        self.misses = 0
        self.forced_cold_replays = 0

    @property
    def clock(self) -> Callable[[], float]:
        return self._runs.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        """Where expiry reads the time (seconds, monotonic): injectable for tests."""
        self._runs.clock = clock

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def take(self, run_id: str) -> LiveRun | None:
        """Removes and returns ``run_id``'s instance (None when absent or expired): one
        task uses it at a time, and a task that fails, times out or loses its lease
        never puts it back."""
        return self._runs.take(run_id)

    def count(self, found: bool, continued: bool) -> StickyResult:
        """Count one workflow task: it found an instance or not, and continued it or not."""
        if continued:
            self.hits += 1
            return "hit"
        if found:
            self.forced_cold_replays += 1
            return "diverged"
        self.misses += 1
        return "miss"

    def forget(self, run_id: str) -> None:
        self._runs.forget(run_id)

    def keep(self, run_id: str, run: LiveRun) -> None:
        self._runs.put(run_id, run, run.history_bytes)

    def clear(self) -> None:
        self._runs.clear()

    def metrics(self) -> StickyCacheMetrics:
        """The counters so far and what is kept now (expired entries evicted first).
        Call it on the worker's event loop, which owns the cache."""
        self._runs.sweep()
        return self.snapshot()

    def snapshot(self) -> StickyCacheMetrics:
        """:meth:`metrics` without the sweep: only reads, so an exporter's thread may call
        it (expired entries not read since still count until they are)."""
        return StickyCacheMetrics(
            hits=self.hits,
            misses=self.misses,
            evictions=self._runs.evictions,
            forced_cold_replays=self.forced_cold_replays,
            entries=len(self._runs),
            history_bytes=self._runs.history_bytes,
        )


__all__ = ["LiveRun", "LiveRuns", "StickyResult"]
