"""``durable-rpc namespace budget set|list|remove``: a namespace's budgets for
``workflow.reserve()`` (AdminService.SetBudget / ListBudgets / RemoveBudget, an admin
key in ``DURABLE_RPC_API_KEY``)."""

from __future__ import annotations

import click

from durable_rpc.cli._admin import _call, _print, _time, address_option, json_option
from durable_rpc.cli._rate_limits import _period, parse_rate
from durable_rpc.errors import InvalidRateLimitError
from durable_rpc.v1 import admin_service_pb2 as pb

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace of the budget."
)
_HEADERS = ["budget", "capacity", "held", "waiting", "waiting units", "refill", "updated"]


def _rows(budgets: list[pb.Budget]) -> list[list[str]]:
    return [
        [
            b.name,
            str(b.capacity),
            str(b.held),
            str(b.waiting),
            str(b.waiting_units),
            (
                f"{b.refill_units}/{_period(b.refill_period_ms)} ({b.refilling} coming back)"
                if b.refill_units
                else "-"
            ),
            _time(b.update_time, b.HasField("update_time")),
        ]
        for b in budgets
    ]


@click.group("budget")
def budget() -> None:
    """Budgets that workflow code reserves from (workflow.reserve(name, amount)): at
    most CAPACITY units held at once; a reservation that does not fit waits, in order."""


@budget.command("set")
@click.argument("name")
@click.option(
    "--capacity",
    type=click.IntRange(min=1),
    required=True,
    help="Units open reservations may hold at once.",
)
@click.option(
    "--refill",
    metavar="UNITS/[N]UNIT",
    help="Released units come back at this rate (e.g. 1000/min) instead of at once.",
)
@namespace_option
@address_option
@json_option
def budget_set(
    name: str, capacity: int, refill: str | None, namespace: str, address: str, as_json: bool
) -> None:
    """Create NAME, or change its capacity or refill (waiting reservations that now fit
    are granted; those larger than a lowered capacity are refused)."""
    units, period_ms = 0, 0
    if refill is not None:
        try:
            units, period_ms = parse_rate(refill)
        except InvalidRateLimitError as exc:
            raise click.BadParameter(str(exc).removeprefix("INVALID_RATE_LIMIT: ")) from None
    request = pb.SetBudgetRequest(
        namespace=namespace,
        name=name,
        capacity=capacity,
        refill_units=units,
        refill_period_ms=period_ms,
    )
    reply: pb.SetBudgetResponse = _call(
        address, lambda c: c.call(c.admin_service.SetBudget, request)
    )
    _print(reply, as_json, _rows([reply.budget]), _HEADERS)


@budget.command("list")
@namespace_option
@address_option
@json_option
def budget_list(namespace: str, address: str, as_json: bool) -> None:
    """The namespace's budgets: capacity, units held, reservations waiting."""
    request = pb.ListBudgetsRequest(namespace=namespace)
    reply: pb.ListBudgetsResponse = _call(
        address, lambda c: c.call(c.admin_service.ListBudgets, request)
    )
    _print(reply, as_json, _rows(list(reply.budgets)), _HEADERS)


@budget.command("remove")
@click.argument("name")
@namespace_option
@address_option
@json_option
def budget_remove(name: str, namespace: str, address: str, as_json: bool) -> None:
    """Remove NAME (refused while a reservation holds or waits for it: BUDGET_IN_USE)."""
    request = pb.RemoveBudgetRequest(namespace=namespace, name=name)
    reply: pb.RemoveBudgetResponse = _call(
        address, lambda c: c.call(c.admin_service.RemoveBudget, request)
    )
    if as_json:
        _print(reply, as_json, [], _HEADERS)
    else:
        click.echo(f"budget {name}: removed")
