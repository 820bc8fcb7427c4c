"""Queries: an in-memory request/response relay between QueryWorkflow and workers.

A query is read-only and answered by a worker replaying the run, so nothing about it is
persisted: ``QueryWorkflow`` puts a pending query on its run's task queue (in this
server process's memory), wakes one ``PollQueryTask`` long poll of that queue, and waits
a bounded time for the ``RespondQueryTask`` that carries the answer. A lost query (the
worker died, the server restarted) simply times out; the caller may ask again.

Limitation: the relay is per server process. With several replicas behind one address,
a query accepted by replica A is only seen by workers polling replica A (see
docs/engine.md).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import deque
from collections.abc import Collection
from dataclasses import dataclass, field

from durable_rpc.errors import ResourceExhaustedError
from durable_rpc.v1 import service_pb2

# Pending (not yet taken) queries per task queue before QueryWorkflow is refused.
MAX_PENDING_PER_QUEUE = 1000


@dataclass
class PendingQuery:
    query_id: str
    definition: tuple[str, str]
    task: service_pb2.PollQueryTaskResponse
    answer: asyncio.Future[service_pb2.RespondQueryTaskRequest] = field(repr=False)


class QueryRouter:
    """Pending queries per ``(namespace, task_queue)`` and the callers awaiting them."""

    def __init__(self) -> None:
        self._pending: dict[tuple[str, str], deque[PendingQuery]] = {}
        # Every query not answered yet (pending or taken by a worker), by id.
        self._open: dict[str, PendingQuery] = {}

    def submit(
        self, namespace: str, task_queue: str, task: service_pb2.PollQueryTaskResponse
    ) -> PendingQuery:
        queue = self._pending.setdefault((namespace, task_queue), deque())
        if len(queue) >= MAX_PENDING_PER_QUEUE:
            raise ResourceExhaustedError(
                f"{len(queue)} queries already wait for a worker on task queue {task_queue!r}"
            )
        query_id = uuid.uuid4().hex
        task.query_id = query_id
        pending = PendingQuery(
            query_id=query_id,
            definition=(task.workflow_type, task.workflow_version or "1"),
            task=task,
            answer=asyncio.get_running_loop().create_future(),
        )
        queue.append(pending)
        self._open[query_id] = pending
        return pending

    def take(
        self, namespace: str, task_queue: str, definitions: Collection[tuple[str, str]]
    ) -> PendingQuery | None:
        """The oldest pending query of the queue this poller can replay (any when it
        named no definitions)."""
        key = (namespace, task_queue)
        queue = self._pending.get(key)
        if not queue:
            return None
        for pending in queue:
            if not definitions or pending.definition in definitions:
                queue.remove(pending)
                if not queue:
                    del self._pending[key]
                return pending
        return None

    def answer(self, query_id: str, response: service_pb2.RespondQueryTaskRequest) -> bool:
        """Deliver a worker's answer; False when nobody waits for it any more."""
        pending = self._open.pop(query_id, None)
        if pending is None or pending.answer.done():
            return False
        pending.answer.set_result(response)
        return True

    def forget(self, namespace: str, task_queue: str, pending: PendingQuery) -> None:
        """The caller stopped waiting (timeout, cancelled call): drop the query."""
        self._open.pop(pending.query_id, None)
        queue = self._pending.get((namespace, task_queue))
        if queue is not None and pending in queue:
            queue.remove(pending)
            if not queue:
                del self._pending[(namespace, task_queue)]
