"""Setting, listing and removing namespace budgets (``_budgets`` grants them)."""

from __future__ import annotations

from durable_rpc.errors import BudgetInUseError, NotFoundError
from durable_rpc.store._budget_records import Budget
from durable_rpc.store._budgets import (
    budget_row,
    check_capacity,
    check_refill,
    describe_budget,
    grant_waiting,
    refuse_larger_than,
    settled,
)
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._shared import require, require_namespace
from durable_rpc.store._tx import Tx


class _BudgetOps(_SqlOpsBase):
    async def set_budget(
        self,
        namespace: str,
        name: str,
        capacity: int,
        refill_units: int = 0,
        refill_period_ms: int = 0,
    ) -> Budget:
        """Creates or changes a budget; a raised capacity grants the waiting reservations
        that now fit, a lowered one refuses those larger than it. One transaction. With a
        refill (``refill_units`` per ``refill_period_ms``), released units come back at
        that rate instead of at once. InvalidArgumentError for a capacity outside
        1..10^15 or a refill that is not 1..10^15 units per 1 ms..31 days (or 0, 0)."""
        require(name, "name")
        check_capacity(capacity)
        check_refill(refill_units, refill_period_ms)

        def op(tx: Tx) -> Budget:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            existing = budget_row(tx, namespace, name)  # the lock first, as every grant
            # What is still coming back, at the old rate until now; from now on at the
            # new one. No refill any more: the spent units are back at once.
            spent = 0 if existing is None or not refill_units else settled(existing, now)[0]
            row = tx.one(
                "INSERT INTO budgets (namespace, name, capacity, updated_at_ms, refill_units, "
                "refill_period_ms, debt_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace, name) DO UPDATE SET "
                "capacity = excluded.capacity, updated_at_ms = excluded.updated_at_ms, "
                "refill_units = excluded.refill_units, "
                "refill_period_ms = excluded.refill_period_ms, "
                "debt = ?, debt_at_ms = excluded.debt_at_ms, next_grant_ms = NULL "
                "RETURNING *",
                (namespace, name, capacity, now, refill_units, refill_period_ms, now, spent),
            )
            assert row is not None
            # Lowered: what can never fit is refused; raised: what fits now is granted.
            refuse_larger_than(tx, namespace, name, capacity, now)
            grant_waiting(tx, namespace, name, now)
            return describe_budget(tx, row)

        return await self._write(op)

    async def list_budgets(self, namespace: str) -> list[Budget]:
        """The namespace's budgets by name, with units held and reservations waiting."""

        def op(tx: Tx) -> list[Budget]:
            require_namespace(tx, namespace)
            rows = tx.all("SELECT * FROM budgets WHERE namespace = ? ORDER BY name", (namespace,))
            return [describe_budget(tx, row) for row in rows]

        return await self._read(op)

    async def remove_budget(self, namespace: str, name: str) -> None:
        """NotFoundError if there is no such budget; BudgetInUseError while a
        reservation holds or waits for it."""
        require(name, "name")

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            row = budget_row(tx, namespace, name)
            if row is None:
                raise NotFoundError(f"namespace {namespace!r} has no budget {name!r}")
            budget = describe_budget(tx, row)
            if budget.held or budget.waiting:
                raise BudgetInUseError(
                    f"budget {name!r} is in use: {budget.held} units held, "
                    f"{budget.waiting} reservations waiting"
                )
            tx.run("DELETE FROM budgets WHERE namespace = ? AND name = ?", (namespace, name))

        await self._write(op)
