"""Setting and listing task-queue activity limits (``_queue_limits`` enforces them)."""

from __future__ import annotations

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._fleet_records import TaskQueueLimit
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._shared import require, require_namespace
from durable_rpc.store._tx import Row, Tx

#: A limit above this is a mistake (the column is an INTEGER on both backends).
MAX_CONCURRENT_ACTIVITIES = 1_000_000


def _limit(row: Row) -> TaskQueueLimit:
    return TaskQueueLimit(
        namespace=row["namespace"],
        task_queue=row["task_queue"],
        max_concurrent_activities=int(row["max_concurrent_activities"]),
        updated_at_ms=int(row["updated_at_ms"]),
    )


class _LimitOps(_SqlOpsBase):
    async def set_task_queue_limit(
        self, namespace: str, task_queue: str, max_concurrent_activities: int | None
    ) -> TaskQueueLimit | None:
        """Sets (None: removes) the queue's limit on activity attempts leased at once,
        enforced by every activity claim (polls and eager claims). Returns the limit now
        in force. InvalidArgumentError for a limit below 1."""
        require(task_queue, "task_queue")
        if max_concurrent_activities is not None and not (
            1 <= max_concurrent_activities <= MAX_CONCURRENT_ACTIVITIES
        ):
            raise InvalidArgumentError(
                f"max_concurrent_activities must be between 1 and {MAX_CONCURRENT_ACTIVITIES}"
                f" (or unset to remove the limit), got {max_concurrent_activities}"
            )

        def op(tx: Tx) -> TaskQueueLimit | None:
            require_namespace(tx, namespace)
            # A changed (raised, removed) limit may let deferred claims through now.
            tx.notes.tasks.add((namespace, task_queue, "activity"))
            if max_concurrent_activities is None:
                tx.run(
                    "DELETE FROM task_queue_limits WHERE namespace = ? AND task_queue = ?",
                    (namespace, task_queue),
                )
                return None
            row = tx.one(
                "INSERT INTO task_queue_limits "
                "(namespace, task_queue, max_concurrent_activities, updated_at_ms) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (namespace, task_queue) DO UPDATE SET "
                "max_concurrent_activities = excluded.max_concurrent_activities, "
                "updated_at_ms = excluded.updated_at_ms RETURNING *",
                (namespace, task_queue, max_concurrent_activities, tx.now_ms()),
            )
            assert row is not None
            return _limit(row)

        return await self._write(op)

    async def list_task_queue_limits(self, namespace: str) -> list[TaskQueueLimit]:
        """The namespace's limits, by task queue."""

        def op(tx: Tx) -> list[TaskQueueLimit]:
            require_namespace(tx, namespace)
            rows = tx.all(
                "SELECT * FROM task_queue_limits WHERE namespace = ? ORDER BY task_queue",
                (namespace,),
            )
            return [_limit(row) for row in rows]

        return await self._read(op)
