"""Idempotent polls: a retried poll gets back the task its lost attempt claimed.

A poll claims a task, then its response can be lost on the way (the worker's call timed
out, the connection broke). Its retry carries the same ``request_id``; the server keeps,
per worker and task kind, the last claimed poll's request id and response, and answers
the retry with that same response (same task, same fencing token) while the lease is
still the worker's -- instead of the task sitting stranded until its lease lapses.

Kept in this process only, one entry per (namespace, worker, kind): bounded by the live
workers, and nothing on the claim path but a dict write. A retry that reaches another
replica claims afresh (the lost task then waits out its lease, as without request ids).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from durable_rpc.store import LeaseRef

_R = TypeVar("_R")


class PollReplay(Generic[_R]):
    """The last claimed poll of each (namespace, worker), for one task kind."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[str, LeaseRef, _R]] = {}

    def remember(
        self, namespace: str, worker_id: str, request_id: str, lease: LeaseRef, response: _R
    ) -> None:
        """Called as soon as a poll has its task, before anything can cancel it."""
        if request_id:
            self._last[(namespace, worker_id)] = (request_id, lease, response)

    async def replay(
        self,
        namespace: str,
        worker_id: str,
        request_id: str,
        lease_holds: Callable[[str, LeaseRef], Awaitable[bool]],
    ) -> _R | None:
        """The response of this very poll's earlier attempt, when it claimed a task whose
        lease is still the worker's (one read, only for a retry); else None."""
        if not request_id:
            return None
        last = self._last.get((namespace, worker_id))
        if last is None or last[0] != request_id:
            return None
        _, lease, response = last
        if not await lease_holds(namespace, lease):
            # Reported, lost or expired since: that task is not this poll's any more
            # (unless a newer poll replaced the entry while the read ran).
            if self._last.get((namespace, worker_id)) is last:
                del self._last[(namespace, worker_id)]
            return None
        return response

    def forget(self, namespace: str, worker_id: str) -> None:
        """A worker that deregistered polls no more."""
        self._last.pop((namespace, worker_id), None)
