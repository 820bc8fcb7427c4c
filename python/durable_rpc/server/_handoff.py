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
import logging
from collections.abc import Hashable

from durable_rpc.errors import DurableRpcError
from durable_rpc.server._notify import Arrival, Waiters
from durable_rpc.store import ClaimedWorkflowTask, StartResult, Store

log = logging.getLogger(__name__)


class Handoffs:
    def __init__(self, waiters: Waiters, store: Store) -> None:
        #: The task-arrival waiters of every long poll (workflow, activity, query).
        self.waiters = waiters
        self._store = store
        self._delivered: dict[Arrival, ClaimedWorkflowTask] = {}
        self._releasing: set[asyncio.Future[None]] = set()

    def reserve(self, key: Hashable) -> Reservation | None:
        """Reserve the oldest poll of ``key`` waiting with its worker id, if any."""
        reserved = self.waiters.reserve(key)
        if reserved is None:
            return None
        future, worker_id = reserved
        return Reservation(self, future, worker_id)

    def waiting(self, key: Hashable) -> int:
        """How many polls of ``key`` wait ready to be handed a task."""
        return self.waiters.named(key)

    def take(self, woken: Arrival) -> ClaimedWorkflowTask | None:
        """For a woken poll: the task handed to it, if that is what woke it."""
        return self._delivered.pop(woken, None)

    def settle(
        self, namespace: str, reservation: Reservation, started: asyncio.Future[StartResult]
    ) -> None:
        """When the start ``reservation`` was made for has ended (a done-callback, so it
        runs even if the start's caller went away): hand its task to the reserved poll,
        wake the poll when there is none, or give the task back when the poll left."""
        handed = None
        if not started.cancelled() and started.exception() is None:
            handed = started.result().workflow_task
        if handed is None:  # a duplicate start, or an error: nothing to hand over
            reservation.cancel()
        elif not reservation.deliver(handed):
            self._give_back(namespace, handed)

    def give_back_leftover(self, namespace: str, woken: Arrival) -> None:
        """A poll leaving (cancelled) without taking what was handed to it gives it back."""
        left = self.take(woken)
        if left is not None:
            self._give_back(namespace, left)

    def _give_back(self, namespace: str, task: ClaimedWorkflowTask) -> None:
        """Release ``task`` to the queue in the background (its lease would expire anyway)."""

        async def release() -> None:
            try:
                await self._store.release_workflow_task(namespace, task.lease)
            except DurableRpcError as error:  # its lease will expire instead
                log.warning("could not release workflow task %s: %s", task.task_id, error)

        releasing = asyncio.ensure_future(release())
        self._releasing.add(releasing)
        releasing.add_done_callback(self._releasing.discard)


class Reservation:
    def __init__(self, owner: Handoffs, future: Arrival, worker_id: str) -> None:
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
