"""SetBudget, ListBudgets and RemoveBudget: a namespace's budgets
for ``workflow.reserve()``, granted by the store in the transactions of decisions,
releases and run closes (``store/_budgets.py``); namespace admin calls (``_auth``)."""

from __future__ import annotations

import grpc

from durable_rpc.server import _convert, _validate
from durable_rpc.store import Budget, Store
from durable_rpc.v1 import admin_service_pb2 as pb


def budget_message(budget: Budget) -> pb.Budget:
    return pb.Budget(
        name=budget.name,
        capacity=budget.capacity,
        held=budget.held,
        waiting=budget.waiting,
        waiting_units=budget.waiting_units,
        update_time=_convert.timestamp(budget.updated_at_ms),
        refill_units=budget.refill_units,
        refill_period_ms=budget.refill_period_ms,
        refilling=budget.refilling,
    )


class AdminBudgetsMixin:
    _store: Store

    async def SetBudget(
        self, request: pb.SetBudgetRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetBudgetResponse:
        # The capacity's range is the store's INVALID_ARGUMENT.
        budget = await self._store.set_budget(
            _validate.namespace(request.namespace),
            _validate.name("name", request.name),
            request.capacity,
            request.refill_units,
            request.refill_period_ms,
        )
        return pb.SetBudgetResponse(budget=budget_message(budget))

    async def ListBudgets(
        self, request: pb.ListBudgetsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListBudgetsResponse:
        budgets = await self._store.list_budgets(_validate.namespace(request.namespace))
        return pb.ListBudgetsResponse(budgets=[budget_message(b) for b in budgets])

    async def RemoveBudget(
        self, request: pb.RemoveBudgetRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemoveBudgetResponse:
        await self._store.remove_budget(
            _validate.namespace(request.namespace), _validate.name("name", request.name)
        )
        return pb.RemoveBudgetResponse()
