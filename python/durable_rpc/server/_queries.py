"""Queries: the relay between QueryWorkflow and the workers that answer them.

A query is answered by a worker replaying the run, and nothing about it enters the run's
history. The query in flight is kept in the store (``Store.submit_query`` and friends,
store/_ops_queries.py) rather than in this process's memory, because with several
server replicas the worker that can answer may poll another replica than the one the
client asked: ``QueryWorkflow`` queues the query, a ``PollQueryTask`` on any replica takes
it, ``RespondQueryTask`` on any replica stores the answer, and the store's
``query_answered`` note (a NOTIFY on PostgreSQL) wakes the asking replica. A lost query
(the worker died) simply times out; the caller may ask again.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Collection

from durable_rpc.errors import DurableRpcError
from durable_rpc.server._notify import Notifier, wait
from durable_rpc.store import Store
from durable_rpc.v1 import service_pb2


class QueryRelay:
    """Asks queries through the store and hands them to pollers."""

    def __init__(self, store: Store, notifier: Notifier) -> None:
        self._store = store
        self._notifier = notifier

    async def ask(
        self,
        namespace: str,
        task_queue: str,
        task: service_pb2.PollQueryTaskResponse,
        timeout_s: float,
    ) -> service_pb2.RespondQueryTaskRequest | None:
        """Queues the query and waits up to ``timeout_s`` for a worker's answer (None
        when none came)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        task.query_id = query_id = uuid.uuid4().hex
        key = (namespace, query_id)
        # Registered before the query exists, so an answer cannot slip by unnoticed.
        answered = self._notifier.answered_queries.register(key)
        try:
            await self._store.submit_query(
                namespace,
                task_queue,
                query_id,
                (task.workflow_type, task.workflow_version),
                task.SerializeToString(),
                max(1, int(timeout_s * 1000)),
                run_id=task.run_id,
            )
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0 or not await wait(answered, remaining):
                    return None
                answered = self._notifier.answered_queries.register(key)
                answer = await self._store.query_answer(namespace, query_id)
                if answer is not None:
                    return service_pb2.RespondQueryTaskRequest.FromString(answer)
        finally:
            answered.cancel()
            # The row expires anyway; a store that is away now must not hide the outcome.
            with contextlib.suppress(DurableRpcError):
                await self._store.forget_query(namespace, query_id)

    async def take(
        self,
        namespace: str,
        task_queue: str,
        definitions: Collection[tuple[str, str]],
        worker_id: str,
    ) -> service_pb2.PollQueryTaskResponse | None:
        """The oldest waiting query of the queue this poller can replay (of its build,
        for a pinned run)."""
        task = await self._store.take_query(namespace, task_queue, definitions, worker_id=worker_id)
        return None if task is None else service_pb2.PollQueryTaskResponse.FromString(task)

    async def answer(self, namespace: str, response: service_pb2.RespondQueryTaskRequest) -> bool:
        """Stores a worker's answer; False when nobody waits for it any more."""
        return await self._store.answer_query(
            namespace, response.query_id, response.SerializeToString()
        )
