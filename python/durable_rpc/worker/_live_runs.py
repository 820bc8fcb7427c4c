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
decision), when it is the least recently used past the capacity, and when the worker
stops. A run closed by anything else (terminated, timed out) leaves by LRU.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from durable_rpc import _core
from durable_rpc.workflow._runtime import WorkflowInstance


@dataclass(slots=True)
class LiveRun:
    """A suspended workflow instance and the machine that replayed it."""

    machine: _core.ReplayMachine
    instance: WorkflowInstance
    #: Events 1..known are the machine's.
    known: int
    #: The ActivationCompletion (bytes) of the commands the last task sent.
    sent: bytes = b""


class LiveRuns:
    """The live instances of the runs this worker decided last, by run id (LRU)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._runs: OrderedDict[str, LiveRun] = OrderedDict()
        #: Tasks that continued a live instance, and those that found one but had to
        #: replay cold because the history did not continue it.
        self.hits = 0
        self.diverged = 0

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._runs

    def take(self, run_id: str) -> LiveRun | None:
        """Removes and returns ``run_id``'s instance: one task uses it at a time, and a
        task that fails, times out or loses its lease never puts it back."""
        return self._runs.pop(run_id, None)

    def forget(self, run_id: str) -> None:
        run = self._runs.pop(run_id, None)
        if run is not None:
            run.instance.loop.abandon()

    def keep(self, run_id: str, run: LiveRun) -> None:
        self._runs[run_id] = run
        self._runs.move_to_end(run_id)
        while len(self._runs) > self._capacity:
            _, evicted = self._runs.popitem(last=False)
            evicted.instance.loop.abandon()

    def clear(self) -> None:
        for run in self._runs.values():
            run.instance.loop.abandon()
        self._runs.clear()


__all__ = ["LiveRun", "LiveRuns"]
