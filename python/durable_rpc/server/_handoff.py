"""Direct dispatch of a new run's first workflow task to a waiting poller.

When a start arrives while a worker's workflow-task poll waits on the run's queue, the
server reserves that poll, claims the run's first task for its worker inside the
starting transaction (an ordinary fenced claim: token raised, lease on database time)
and resolves the poll with it: the separate claim transaction and its wake-up are saved.

A reservation that ends without a task (the start was a duplicate or failed) wakes the
poll, which then claims the ordinary way. A task whose poll left meanwhile (deadline,
cancelled call) is released back to the queue under its lease (see
``Store.release_workflow_task``); were even that to fail, its lease would expire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from durable_rpc.server._notify import Waiters
from durable_rpc.store import ClaimedWorkflowTask


class Handoffs:
    def __init__(self, waiters: Waiters) -> None:
        self._waiters = waiters
        self._delivered: dict[asyncio.Future[None], ClaimedWorkflowTask] = {}

    def reserve(self, key: Hashable) -> Reservation | None:
        """Reserve the oldest poll of ``key`` waiting with its worker id, if any."""
        reserved = self._waiters.reserve(key)
        if reserved is None:
            return None
        future, worker_id = reserved
        return Reservation(self, future, worker_id)

    def waiting(self, key: Hashable) -> int:
        """How many polls of ``key`` wait ready to be handed a task."""
        return self._waiters.named(key)

    def take(self, woken: asyncio.Future[None]) -> ClaimedWorkflowTask | None:
        """For a woken poll: the task handed to it, if that is what woke it."""
        return self._delivered.pop(woken, None)


class Reservation:
    def __init__(self, owner: Handoffs, future: asyncio.Future[None], worker_id: str) -> None:
        self._owner = owner
        self._future = future
        self.worker_id = worker_id

    def deliver(self, task: ClaimedWorkflowTask) -> bool:
        """Hand ``task`` to the reserved poll; False when it is no longer waiting."""
        if self._future.done():
            return False
        self._owner._delivered[self._future] = task
        self._future.set_result(None)
        return True

    def cancel(self) -> None:
        """Nothing to hand over: wake the poll so it claims the ordinary way."""
        if not self._future.done():
            self._future.set_result(None)


__all__ = ["Handoffs", "Reservation"]
