"""Wake-ups for long polls: task arrivals per queue and run closures.

The store reports events after each commit, possibly from its writer thread; every
entry point here hops onto the server's event loop before touching waiters.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from durable_rpc.store import RunOutcome

# Outcomes of recently closed runs kept for result long polls (see Notifier.outcome_of).
_KEPT_OUTCOMES = 4096


class Wakeup:
    """One notification of a task arrival, travelling from poller to poller.

    A woken poll whose claim finds nothing (its filter - activity types, the workflow
    definitions its worker registered - excludes what arrived) passes the wake-up on to
    the next waiting poll that has not come up empty for it, so the arrival reaches a
    poll that can take it. Every poll that claims nothing joins ``empty_handed`` and is
    skipped from then on: the wake-up ends once every waiting poll has tried it, so it
    never loops. (A claim that succeeds passes it on too, tried set and all: one
    notification may announce several tasks, and a poll that found none of them before
    cannot take them now.)
    """

    __slots__ = ("empty_handed",)

    def __init__(self) -> None:
        self.empty_handed: set[object] = set()


#: A registered waiter: resolved with the wake-up that woke it (None: a timer, a
#: hand-over, a wake-up of every waiter).
Arrival = asyncio.Future[Wakeup | None]


@dataclass(slots=True)
class _Waiter:
    #: The poll waiting (one object per long poll, across its re-registrations).
    poller: object
    #: The waiting worker, once the poll waits (`name_waiter`): a start may hand it a task.
    worker_id: str | None = None


class Waiters:
    """Futures waiting on a key, woken oldest first.

    `notify(key)` wakes ONE waiter: every woken long poll runs a claim, so waking all
    pollers of a queue per arrival would turn one task into as many claim transactions
    as there are pollers (a thundering herd). The woken poll passes the wake-up on
    (see `Wakeup` and `WorkerService._long_poll`): after a claim, so a burst of tasks
    announced by one notification is still drained promptly; after finding nothing, so
    a task its filter excludes still reaches a poll that can take it.
    """

    def __init__(self) -> None:
        # Insertion order is wake order.
        self._waiting: defaultdict[Hashable, dict[Arrival, _Waiter]] = defaultdict(dict)

    def register(self, key: Hashable, poller: object = None) -> Arrival:
        """Register before checking for work, so an arrival in between is not missed.

        ``poller`` identifies the long poll across its registrations (see `Wakeup`)."""
        future: Arrival = asyncio.get_running_loop().create_future()
        self._waiting[key][future] = _Waiter(future if poller is None else poller)
        future.add_done_callback(lambda f: self._discard(key, f))
        return future

    def name_waiter(self, key: Hashable, future: Arrival, worker_id: str) -> None:
        """Say which worker ``future`` (registered under ``key``) waits for."""
        waiter = self._waiting.get(key, {}).get(future)
        if waiter is not None:
            waiter.worker_id = worker_id

    def waiting(self, key: Hashable) -> int:
        """How many waiters of ``key`` still wait."""
        return sum(1 for f in self._waiting.get(key, ()) if not f.done())

    def named(self, key: Hashable) -> int:
        """How many waiters of ``key`` named their worker and still wait."""
        waiting = self._waiting.get(key, {})
        return sum(1 for f, w in waiting.items() if w.worker_id is not None and not f.done())

    def reserve(self, key: Hashable) -> tuple[Arrival, str] | None:
        """Take the oldest waiter of ``key`` that named its worker out of the wake order
        (no notification reaches it any more): the caller will resolve it."""
        waiting = self._waiting.get(key)
        for future, waiter in list((waiting or {}).items()):
            if waiter.worker_id is not None and not future.done():
                self._discard(key, future)
                return future, waiter.worker_id
        return None

    def _discard(self, key: Hashable, future: Arrival) -> None:
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.pop(future, None)
            if not waiting:
                del self._waiting[key]

    def notify(self, key: Hashable, wakeup: Wakeup | None = None) -> None:
        """Wake the oldest waiter of `key` still waiting that has not come up empty for
        ``wakeup`` (a new wake-up when None); nobody when all of them have."""
        wakeup = wakeup or Wakeup()
        for future, waiter in list(self._waiting.get(key, {}).items()):
            if not future.done() and waiter.poller not in wakeup.empty_handed:
                future.set_result(wakeup)
                return

    def notify_every(self, key: Hashable) -> None:
        for future in list(self._waiting.get(key, ())):
            if not future.done():
                future.set_result(None)

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.notify_every(key)


async def wait(future: asyncio.Future[Any], timeout: float) -> bool:
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

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_due: Callable[[int], None],
        on_closed: Callable[[str, str], None] | None = None,
    ) -> None:
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._on_due = on_due
        #: Told of every closed run (namespace, run id), on the event loop.
        self._on_closed = on_closed
        self.tasks = Waiters()
        self.closed_runs = Waiters()
        #: Callers of QueryWorkflow waiting for their answer, by (namespace, query id).
        self.answered_queries = Waiters()
        #: Callers of UpdateWorkflow waiting for the update's next stage, by (namespace,
        #: update id).
        self.changed_updates = Waiters()
        #: Readers of a run's message streams waiting for items, by (namespace, run id).
        self.appended_streams = Waiters()
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

    def stream_appended(self, namespace: str, run_id: str) -> None:
        self._call(self.appended_streams.notify_every, (namespace, run_id))

    def run_closed(self, namespace: str, run_id: str, outcome: RunOutcome | None = None) -> None:
        self._call(self._closed, (namespace, run_id), outcome)

    def _closed(self, key: tuple[str, str], outcome: RunOutcome | None) -> None:
        if outcome is not None:
            self._outcomes[key] = outcome
            while len(self._outcomes) > _KEPT_OUTCOMES:
                self._outcomes.popitem(last=False)
        self.closed_runs.notify_every(key)
        if self._on_closed is not None:
            self._on_closed(*key)

    def outcome_of(self, namespace: str, run_id: str) -> RunOutcome | None:
        """The outcome of a run this process closed recently (terminal: never stale)."""
        return self._outcomes.get((namespace, run_id))

    def due_at(self, due_ms: int) -> None:
        self._call(self._on_due, due_ms)

    def wake_all_pollers(self) -> None:
        self._call(self.tasks.notify_all)
