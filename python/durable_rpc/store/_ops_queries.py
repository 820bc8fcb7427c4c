"""Queries in flight: the relay between QueryWorkflow and the workers that answer them.

A query is read-only, so it is not part of any run's history; it is still kept in the
database while it is answered, because the replica a client asks is not necessarily a
replica the run's workers poll. Every step is a short transaction: the asking replica
queues the query (``submit_query``), a poller on any replica takes it (``take_query``, a
SKIP LOCKED claim on PostgreSQL), the worker's answer is stored (``answer_query``) and its
listener note (``query_answered``, a NOTIFY across replicas) wakes the asking replica,
which reads the answer (``query_answer``) and deletes the row (``forget_query``). A row
whose caller died expires and is deleted by the next ``submit_query``.
"""

from __future__ import annotations

from collections.abc import Collection

from durable_rpc.errors import ResourceExhaustedError
from durable_rpc.store._build_pins import WORKER_BUILD
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._shared import require, require_namespace, version_or_default
from durable_rpc.store._tx import Tx

#: Queries waiting for a worker on one task queue before ``submit_query`` refuses more.
MAX_QUEUED_QUERIES = 1000


class _QueryOps(_SqlOpsBase):
    """Queries waiting for, taken by and answered by workers."""

    async def submit_query(
        self,
        namespace: str,
        task_queue: str,
        query_id: str,
        definition: tuple[str, str],
        task: bytes,
        timeout_ms: int,
        *,
        run_id: str | None = None,
    ) -> None:
        """Queues a query of ``run_id`` (whose build pin it carries: None, no pin)."""
        require(task_queue, "task_queue")
        require(query_id, "query_id")
        workflow_type, version = definition[0], version_or_default(definition[1])

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # Rows of callers that died before they could delete them.
            tx.run("DELETE FROM queries WHERE expires_at_ms <= ?", (now,))
            queued = tx.value(
                "SELECT COUNT(*) AS n FROM queries WHERE namespace = ? AND task_queue = ? "
                "AND state = 'queued'",
                (namespace, task_queue),
            )
            if queued >= MAX_QUEUED_QUERIES:
                raise ResourceExhaustedError(
                    f"{queued} queries already wait for a worker on task queue {task_queue!r}"
                )
            # The run's build pin (runs.build_id: '' unversioned, NULL undecided; see
            # _build_pins): a pinned run's query is answered only by a worker of its build,
            # whose code is the one that decides the run.
            pin = (
                None
                if run_id is None
                else tx.value(
                    "SELECT NULLIF(build_id, '') AS pin FROM runs "
                    "WHERE namespace = ? AND run_id = ?",
                    (namespace, run_id),
                )
            )
            tx.run(
                "INSERT INTO queries (query_id, namespace, task_queue, workflow_type, "
                "workflow_version, task, state, created_at_ms, expires_at_ms, build_id) "
                "VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
                (
                    query_id,
                    namespace,
                    task_queue,
                    workflow_type,
                    version,
                    task,
                    now,
                    now + timeout_ms,
                    pin,
                ),
            )
            tx.notes.tasks.add((namespace, task_queue, "query"))

        await self._write(op)

    async def take_query(
        self,
        namespace: str,
        task_queue: str,
        definitions: Collection[tuple[str, str]],
        *,
        worker_id: str = "",
    ) -> bytes | None:
        """The oldest unexpired query of the queue whose workflow definition the poller
        can replay (any, when it named none) and, for a pinned run's query, whose build
        is the one ``worker_id`` registered with; now taken; its serialized task."""
        pairs = sorted({(name, version_or_default(version)) for name, version in definitions})
        replayable = ""
        params: list[object] = []
        if pairs:
            replayable = (
                " AND ("
                + " OR ".join(["(workflow_type = ? AND workflow_version = ?)"] * len(pairs))
                + ")"
            )
            params = [value for pair in pairs for value in pair]

        def op(tx: Tx) -> bytes | None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            row = tx.one(
                "UPDATE queries SET state = 'taken' WHERE query_id = ("
                "SELECT query_id FROM queries WHERE namespace = ? AND task_queue = ? "
                f"AND state = 'queued' AND expires_at_ms > ?{replayable} "
                f"AND (build_id IS NULL OR build_id = {WORKER_BUILD}) "
                f"ORDER BY created_at_ms LIMIT 1{tx.claim_lock_suffix}) RETURNING task",
                (namespace, task_queue, now, *params, namespace, worker_id),
            )
            return None if row is None else bytes(row["task"])

        return await self._write(op)

    async def answer_query(self, namespace: str, query_id: str, answer: bytes) -> bool:
        """Stores a worker's answer; False when nobody waits for it any more (the caller
        gave up, or another answer came first)."""

        def op(tx: Tx) -> bool:
            require_namespace(tx, namespace)
            answered = tx.run(
                "UPDATE queries SET state = 'answered', answer = ? WHERE namespace = ? "
                "AND query_id = ? AND state <> 'answered' AND expires_at_ms > ?",
                (answer, namespace, query_id, tx.now_ms()),
            )
            if answered:
                tx.notes.answered.append((namespace, query_id))
            return bool(answered)

        return await self._write(op)

    async def query_answer(self, namespace: str, query_id: str) -> bytes | None:
        def op(tx: Tx) -> bytes | None:
            row = tx.one(
                "SELECT answer FROM queries WHERE namespace = ? AND query_id = ? "
                "AND state = 'answered'",
                (namespace, query_id),
            )
            return None if row is None else bytes(row["answer"])

        return await self._read_latest(op)

    async def forget_query(self, namespace: str, query_id: str) -> None:
        def op(tx: Tx) -> None:
            tx.run(
                "DELETE FROM queries WHERE namespace = ? AND query_id = ?", (namespace, query_id)
            )

        await self._write(op)
