"""Which claim cycles poll: all of them while work flows, a few while the queues are quiet.

Every poll a cycle starts costs the server a claim attempt, and an idle poll is re-sent at
each long-poll deadline. A worker with many cycles would so keep the server claiming for
nothing while its queues are quiet, and one with few leaves throughput on the table when
they are busy (tasks wait for a cycle to come back instead of being handed to a waiting
poll). So a cycle beyond the always-polling ones of its kind starts parked, and parks
again after a poll that found nothing for its whole deadline; one parked cycle resumes
each time a poll of that kind brings a task while no other cycle of the kind is polling:
the polls no longer keep up with the arrivals. Under load a worker grows to all its
cycles within as many claims; idle, it holds its always-polling cycles' polls only.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict, deque
from collections.abc import Hashable, Iterator
from contextlib import contextmanager, suppress


class CycleGate:
    def __init__(self) -> None:
        self._polling: Counter[Hashable] = Counter()
        self._parked: defaultdict[Hashable, deque[asyncio.Future[None]]] = defaultdict(deque)
        self._closed = False

    @contextmanager
    def polling(self, kind: Hashable) -> Iterator[None]:
        """Around one poll of a cycle of ``kind``."""
        self._polling[kind] += 1
        try:
            yield
        finally:
            self._polling[kind] -= 1

    def claimed(self, kind: Hashable) -> None:
        """A poll of ``kind`` brought a task: when no other cycle of the kind is polling,
        the arrivals outpace the polls, and one parked cycle resumes."""
        if self._polling[kind] > 0:
            return
        parked = self._parked[kind]
        while parked:
            waiter = parked.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def park(self, kind: Hashable) -> None:
        """Wait, parked, until :meth:`claimed` or :meth:`close` lets this cycle go on."""
        if self._closed:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._parked[kind].append(waiter)
        try:
            await waiter
        finally:
            if waiter.cancelled():  # the cycle was cancelled while parked
                with suppress(ValueError):
                    self._parked[kind].remove(waiter)

    def close(self) -> None:
        """The run stops claiming: every parked cycle goes on (to see it and end)."""
        self._closed = True
        for parked in self._parked.values():
            while parked:
                waiter = parked.popleft()
                if not waiter.done():
                    waiter.set_result(None)
