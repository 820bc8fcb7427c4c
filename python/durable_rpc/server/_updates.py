"""Workflow updates: pending requests kept outside history until a workflow accepts them.

An update becomes durable when the workflow *accepts* it: the worker's completion
records ``UpdateAccepted`` (with the request) and later ``UpdateCompleted`` in history,
which is the source of truth for both stages. Before that, a request is held here, in
this server process's memory, and handed to every workflow task of its run until the
worker reports it accepted (a command) or rejected (``rejected_updates``): a rejected
update therefore leaves no trace in history. If the server restarts in between, the
caller's call fails (UNAVAILABLE) or times out (UPDATE_TIMEOUT) and it retries with the
same update_id: an update accepted before the restart is found in history, one that was
not is simply requested again (see docs/engine.md, "Updates").

Limitation (as for queries): with several replicas, a pending request is only delivered
with workflow tasks claimed through the replica that holds it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass

from durable_rpc.errors import ResourceExhaustedError
from durable_rpc.v1 import payload_pb2, service_pb2

# Pending (not yet accepted or rejected) requests before UpdateWorkflow is refused.
MAX_PENDING = 10_000
# Rejections remembered for deduplication (a repeated id gets the same rejection).
MAX_REMEMBERED_REJECTIONS = 10_000


@dataclass
class _Pending:
    update_id: str
    update_name: str
    input: payload_pb2.Payload


class UpdateRegistry:
    """Pending update requests per run, remembered rejections, and the callers waiting
    for an update's next stage (woken by update id)."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], dict[str, _Pending]] = {}
        self._count = 0
        self._rejected: OrderedDict[tuple[str, str, str], payload_pb2.Failure] = OrderedDict()
        self._waiters: dict[tuple[str, str], set[asyncio.Future[None]]] = {}

    # --- requests -------------------------------------------------------------------

    def request(
        self,
        namespace: str,
        run_id: str,
        update_id: str,
        update_name: str,
        input: payload_pb2.Payload,
    ) -> None:
        """Hold the request for the run's next workflow tasks (idempotent by id)."""
        run = self._pending.setdefault((namespace, run_id), {})
        if update_id in run:
            return
        if self._count >= MAX_PENDING:
            raise ResourceExhaustedError(f"{self._count} updates already wait for a worker")
        run[update_id] = _Pending(update_id, update_name, input)
        self._count += 1

    def pending(self, namespace: str, run_id: str) -> list[service_pb2.PendingUpdate]:
        """The run's undecided requests, in arrival order (delivered with each task)."""
        run = self._pending.get((namespace, run_id))
        if not run:
            return []
        return [
            service_pb2.PendingUpdate(
                update_id=p.update_id, update_name=p.update_name, input=p.input
            )
            for p in run.values()
        ]

    def _drop(self, namespace: str, update_id: str, run_id: str | None) -> str | None:
        """Forget the pending request ``update_id`` (of ``run_id``, or of any run of the
        namespace); the run it belonged to."""
        for (ns, rid), run in list(self._pending.items()):
            if ns != namespace or (run_id is not None and rid != run_id):
                continue
            if run.pop(update_id, None) is not None:
                self._count -= 1
                if not run:
                    del self._pending[(ns, rid)]
                return rid
        return None

    def forget(self, namespace: str, run_id: str, update_id: str) -> None:
        """The run closed before accepting: the request can never be delivered."""
        self._drop(namespace, update_id, run_id)

    # --- outcomes reported by workers ---------------------------------------------------

    def accepted(self, namespace: str, update_id: str) -> None:
        """A completion recorded UpdateAccepted (or UpdateCompleted) for ``update_id``."""
        self._drop(namespace, update_id, None)
        self._wake(namespace, update_id)

    def rejected(self, namespace: str, update_id: str, failure: payload_pb2.Failure) -> None:
        """The validator rejected ``update_id``: remembered, never recorded."""
        run_id = self._drop(namespace, update_id, None)
        if run_id is not None:
            self._rejected[(namespace, run_id, update_id)] = failure
            while len(self._rejected) > MAX_REMEMBERED_REJECTIONS:
                self._rejected.popitem(last=False)
        self._wake(namespace, update_id)

    def rejection(self, namespace: str, run_id: str, update_id: str) -> payload_pb2.Failure | None:
        return self._rejected.get((namespace, run_id, update_id))

    # --- waiting ----------------------------------------------------------------------

    def waiter(self, namespace: str, update_id: str) -> asyncio.Future[None]:
        """A future resolved at the next change of ``update_id``; cancel it when done."""
        key = (namespace, update_id)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(key, set())
        waiters.add(future)

        def discard(done: asyncio.Future[None]) -> None:
            current = self._waiters.get(key)
            if current is not None:
                current.discard(done)
                if not current:
                    del self._waiters[key]

        future.add_done_callback(discard)
        return future

    def _wake(self, namespace: str, update_id: str) -> None:
        for future in list(self._waiters.get((namespace, update_id), ())):
            if not future.done():
                future.set_result(None)
