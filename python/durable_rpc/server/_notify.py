"""Wake-ups for long polls: task arrivals per queue and run closures.

The store reports events after each commit, possibly from its writer thread; every
entry point here hops onto the server's event loop before touching waiters.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable

from durable_rpc.store import RunOutcome

# Outcomes of recently closed runs kept for result long polls (see Notifier.outcome_of).
_KEPT_OUTCOMES = 4096


class Waiters:
    """Futures waiting on a key, woken oldest first.

    `notify(key)` wakes ONE waiter: every woken long poll runs a claim, so waking all
    pollers of a queue per arrival would turn one task into as many claim transactions
    as there are pollers (a thundering herd). A poller that claimed after a wake-up
    passes the wake-up on (see `WorkerService._long_poll`), so a burst of tasks announced
    by one notification is still drained promptly.
    """

    def __init__(self) -> None:
        # Insertion order is wake order; the value names the waiting worker once the
        # poll waits (`name_waiter`), which lets a start hand it a task (`reserve`).
        self._waiting: defaultdict[Hashable, dict[asyncio.Future[None], str | None]] = defaultdict(
            dict
        )

    def register(self, key: Hashable) -> asyncio.Future[None]:
        """Register before checking for work, so an arrival in between is not missed."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[key][future] = None
        future.add_done_callback(lambda f: self._discard(key, f))
        return future

    def name_waiter(self, key: Hashable, future: asyncio.Future[None], worker_id: str) -> None:
        """Say which worker ``future`` (registered under ``key``) waits for."""
        waiting = self._waiting.get(key)
        if waiting is not None and future in waiting:
            waiting[future] = worker_id

    def named(self, key: Hashable) -> int:
        """How many waiters of ``key`` named their worker and still wait."""
        waiting = self._waiting.get(key, {})
        return sum(1 for f, w in waiting.items() if w is not None and not f.done())

    def reserve(self, key: Hashable) -> tuple[asyncio.Future[None], str] | None:
        """Take the oldest waiter of ``key`` that named its worker out of the wake order
        (no notification reaches it any more): the caller will resolve it."""
        waiting = self._waiting.get(key)
        for future, worker_id in list((waiting or {}).items()):
            if worker_id is not None and not future.done():
                self._discard(key, future)
                return future, worker_id
        return None

    def _discard(self, key: Hashable, future: asyncio.Future[None]) -> None:
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.pop(future, None)
            if not waiting:
                del self._waiting[key]

    def notify(self, key: Hashable) -> None:
        """Wake the oldest waiter of `key` that is still waiting."""
        for future in list(self._waiting.get(key, ())):
            if not future.done():
                future.set_result(None)
                return

    def notify_every(self, key: Hashable) -> None:
        for future in list(self._waiting.get(key, ())):
            if not future.done():
                future.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.notify_every(key)


async def wait(future: asyncio.Future[None], timeout: float) -> bool:
    """Wait for a waiter at most `timeout` seconds; True if a wake-up resolved it.

    A plain timer that resolves the future: cheaper than asyncio.wait/wait_for, which
    build tasks, sets and callbacks on every long poll (a hot path). Cancelling the
    awaiting call still raises CancelledError as usual.
    """
    if future.done():
        return True
    timed_out = False

    def expire() -> None:
        nonlocal timed_out
        if not future.done():
            timed_out = True
            future.set_result(None)

    timer = asyncio.get_running_loop().call_later(timeout, expire)
    try:
        await future
    finally:
        timer.cancel()
    return not timed_out


class Notifier:
    """The server's StoreListener: routes store events to long-poll waiters."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_due: Callable[[int], None]) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._on_due = on_due
        self.tasks = Waiters()
        self.closed_runs = Waiters()
        #: Callers of QueryWorkflow waiting for their answer, by (namespace, query id).
        self.answered_queries = Waiters()
        #: Callers of UpdateWorkflow waiting for the update's next stage, by (namespace,
        #: update id).
        self.changed_updates = Waiters()
        self._outcomes: OrderedDict[tuple[str, str], RunOutcome] = OrderedDict()

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        if threading.get_ident() == self._loop_thread:
            fn(*args)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(fn, *args)

    # StoreListener protocol
    def tasks_available(self, namespace: str, task_queue: str, kind: str) -> None:
        # Every query poller of the queue: a poller without the run's definition takes
        # nothing and would not pass a single wake-up on.
        wake = self.tasks.notify_every if kind == "query" else self.tasks.notify
        self._call(wake, (namespace, task_queue, kind))

    def query_answered(self, namespace: str, query_id: str) -> None:
        self._call(self.answered_queries.notify_every, (namespace, query_id))

    def update_changed(self, namespace: str, update_id: str) -> None:
        self._call(self.changed_updates.notify_every, (namespace, update_id))

    def run_closed(self, namespace: str, run_id: str, outcome: RunOutcome | None = None) -> None:
        self._call(self._closed, (namespace, run_id), outcome)

    def _closed(self, key: tuple[str, str], outcome: RunOutcome | None) -> None:
        if outcome is not None:
            self._outcomes[key] = outcome
            while len(self._outcomes) > _KEPT_OUTCOMES:
                self._outcomes.popitem(last=False)
        self.closed_runs.notify_every(key)

    def outcome_of(self, namespace: str, run_id: str) -> RunOutcome | None:
        """The outcome of a run this process closed recently (terminal: never stale)."""
        return self._outcomes.get((namespace, run_id))

    def due_at(self, due_ms: int) -> None:
        self._call(self._on_due, due_ms)

    def wake_all_pollers(self) -> None:
        self._call(self.tasks.notify_all)
