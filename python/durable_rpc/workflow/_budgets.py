"""Budgets for parallel work: ``async with workflow.reserve("llm-tokens", 2_000):``.

Entering emits a ReserveBudget command (it takes a seq: the reservation's identity);
the store grants it in the transaction that records the decision when the units are
free and no earlier reservation of the budget waits, else the reservation waits durably
(the run is suspended; nothing in the worker holds it) until a release or a run close
frees enough units, and that transaction appends BudgetReserved and wakes the run.
Either way the next activation resolves the awaiting code, so a replay gets the same
answer without asking again. Leaving the block (normally, by an exception or by
cancellation while still waiting) emits ReleaseBudget with the reservation's seq; a run
that closes while holding or waiting is released by the store in the close's own
transaction.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING

from durable_rpc.v1 import workflow_task_pb2

if TYPE_CHECKING:
    from durable_rpc.workflow._runtime import WorkflowInstance


class BudgetError(Exception):
    """The reservation was refused: ``reason`` is "BUDGET_NOT_FOUND" (the namespace has
    no such budget) or "BUDGET_AMOUNT_EXCEEDS_CAPACITY" (more than it can ever hold)."""

    failure_type = "BudgetError"

    def __init__(self, message: str, *, budget: str, amount: int, reason: str) -> None:
        super().__init__(message)
        self.message = message
        self.budget = budget
        self.amount = amount
        self.reason = reason


@dataclass
class PendingReservation:
    seq: int
    budget: str
    amount: int
    granted: asyncio.Future[None]


def resolve(instance: WorkflowInstance, job: workflow_task_pb2.ResolveBudgetJob) -> None:
    """Resolves the code awaiting reservation ``job.seq``. A resolution of one already
    released (its waiting was abandoned while the grant was on its way) is expected."""
    pending = instance._budgets.get(job.seq)
    if pending is None:
        if job.seq in instance._abandoned:
            instance._abandoned.discard(job.seq)
            return
        raise LookupError(f"budget resolution for unknown seq {job.seq}")
    if pending.granted.done():
        return
    if job.HasField("failure"):
        del instance._budgets[job.seq]
        pending.granted.set_exception(
            BudgetError(
                f"reservation of {pending.amount} from budget {pending.budget!r} "
                f"(seq {job.seq}) was refused: {job.failure.type}: {job.failure.message}",
                budget=pending.budget,
                amount=pending.amount,
                reason=job.failure.type,
            )
        )
        return
    pending.granted.set_result(None)


class Reservation:
    """``async with workflow.reserve(budget, amount):`` (see the module docstring)."""

    def __init__(self, budget: str, amount: int) -> None:
        if not budget:
            raise ValueError("budget name is empty")
        # bool is an int: reserve("b", True) is a mistake, not one unit.
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            raise ValueError(f"a reservation's amount must be an int > 0, got {amount!r}")
        self.budget = budget
        self.amount = amount
        self.seq = 0
        self._instance: WorkflowInstance | None = None

    async def __aenter__(self) -> Reservation:
        from durable_rpc.workflow._api import current

        instance = current()
        if self._instance is not None:
            raise RuntimeError("a Reservation is entered once")
        self._instance = instance
        self.seq = instance._take_seq()
        pending = PendingReservation(
            self.seq, self.budget, self.amount, instance.loop.create_future()
        )
        instance._budgets[self.seq] = pending
        instance._emit(
            workflow_task_pb2.Command(
                seq=self.seq,
                reserve_budget=workflow_task_pb2.ReserveBudget(
                    budget=self.budget, amount=self.amount
                ),
            )
        )
        try:
            await pending.granted
        except asyncio.CancelledError:
            # Stop waiting: the store drops the waiting reservation (or returns its
            # units, if the grant is already on its way).
            self._release()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release()

    def _release(self) -> None:
        instance = self._instance
        if instance is None or instance._budgets.pop(self.seq, None) is None:
            return
        instance._abandoned.add(self.seq)
        instance._emit(
            workflow_task_pb2.Command(
                seq=self.seq,
                release_budget=workflow_task_pb2.ReleaseBudget(reservation_seq=self.seq),
            )
        )


def reserve(budget: str, amount: int) -> Reservation:
    """Reserve ``amount`` units of the namespace budget ``budget`` for the block: waits
    durably (deferred, never failed) until they are free, releases them on exit. Raises
    BudgetError when the budget does not exist or ``amount`` exceeds its capacity, and
    ValueError (at once) for an empty name or an amount that is not an int > 0."""
    return Reservation(budget, amount)
