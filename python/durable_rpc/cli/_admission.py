"""``durable-rpc namespace admission set|show|remove``: a namespace's limit of open runs
and start rate (AdminService.SetNamespaceAdmission / GetNamespaceAdmission /
RemoveNamespaceAdmission, an admin key in ``DURABLE_RPC_API_KEY``)."""

from __future__ import annotations

import click

from durable_rpc.cli._admin import _call, _print, _time, address_option, json_option
from durable_rpc.v1 import admin_service_pb2 as pb

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace the policy is of."
)
_HEADERS = [
    "max open runs",
    "rate",
    "over limit",
    "per key",
    "open runs",
    "waiting",
    "updated",
]
_OVER_LIMIT = {"queue": pb.ADMISSION_OVER_LIMIT_QUEUE, "refuse": pb.ADMISSION_OVER_LIMIT_REFUSE}
_KEY_STRATEGY = {
    "queue": pb.CONCURRENCY_KEY_STRATEGY_QUEUE,
    "cancel-newest": pb.CONCURRENCY_KEY_STRATEGY_CANCEL_NEWEST,
    "cancel-oldest": pb.CONCURRENCY_KEY_STRATEGY_CANCEL_OLDEST,
}
_KEY_NAME = {value: name for name, value in _KEY_STRATEGY.items()}


def _rows(admission: pb.NamespaceAdmission) -> list[list[str]]:
    period_ms = admission.period.ToMilliseconds()
    rate = (
        f"{admission.starts_per_period} per {period_ms} ms" if admission.starts_per_period else "-"
    )
    over = "refuse" if admission.over_limit == pb.ADMISSION_OVER_LIMIT_REFUSE else "queue"
    strategy = _KEY_NAME.get(admission.key_strategy, "queue")
    per_key = (
        f"{admission.max_open_runs_per_key} ({strategy})"
        if admission.max_open_runs_per_key
        else "-"
    )
    return [
        [
            str(admission.max_open_runs or "-"),
            rate,
            over,
            per_key,
            str(admission.open_runs),
            str(admission.waiting_runs),
            _time(admission.update_time, admission.HasField("update_time")),
        ]
    ]


@click.group("admission")
def admission() -> None:
    """A namespace's admission: at most N open runs and M starts per period; a start over
    it waits, not yet admitted (queue) or is refused with ADMISSION_LIMIT (refuse)."""


@admission.command("set")
@click.option("--max-open-runs", type=click.IntRange(min=1), help="Open runs admitted at once.")
@click.option(
    "--rate",
    type=click.IntRange(min=1),
    help="Starts admitted per --period (a token bucket of that size).",
)
@click.option(
    "--period-ms",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="The period of --rate, in milliseconds.",
)
@click.option(
    "--over-limit",
    type=click.Choice(sorted(_OVER_LIMIT)),
    default="queue",
    show_default=True,
    help="What a start over the policy gets: wait (queue) or ADMISSION_LIMIT (refuse).",
)
@click.option(
    "--max-open-runs-per-key",
    type=click.IntRange(min=1),
    help="Open runs admitted at once per concurrency key (start_workflow's concurrency_key).",
)
@click.option(
    "--key-strategy",
    type=click.Choice(sorted(_KEY_STRATEGY)),
    default="queue",
    show_default=True,
    help="What a start over its key's limit gets: wait, refused, or the key's oldest run "
    "cancelled.",
)
@namespace_option
@address_option
@json_option
def admission_set(
    max_open_runs: int | None,
    rate: int | None,
    period_ms: int,
    over_limit: str,
    max_open_runs_per_key: int | None,
    key_strategy: str,
    namespace: str,
    address: str,
    as_json: bool,
) -> None:
    """Sets the namespace's admission policy (at least one of --max-open-runs, --rate,
    --max-open-runs-per-key)."""
    if max_open_runs is None and rate is None and max_open_runs_per_key is None:
        raise click.UsageError("give --max-open-runs, --rate or --max-open-runs-per-key")
    request = pb.SetNamespaceAdmissionRequest(
        namespace=namespace,
        max_open_runs=max_open_runs or 0,
        starts_per_period=rate or 0,
        over_limit=_OVER_LIMIT[over_limit],
        max_open_runs_per_key=max_open_runs_per_key or 0,
        key_strategy=_KEY_STRATEGY[key_strategy],
    )
    if rate:
        request.period.FromMilliseconds(period_ms)
    reply: pb.SetNamespaceAdmissionResponse = _call(
        address, lambda c: c.call(c.admin_service.SetNamespaceAdmission, request)
    )
    _print(reply, as_json, _rows(reply.admission), _HEADERS)


@admission.command("show")
@namespace_option
@address_option
@json_option
def admission_show(namespace: str, address: str, as_json: bool) -> None:
    """The namespace's policy with its admitted open runs and waiting runs."""
    request = pb.GetNamespaceAdmissionRequest(namespace=namespace)
    reply: pb.GetNamespaceAdmissionResponse = _call(
        address, lambda c: c.call(c.admin_service.GetNamespaceAdmission, request)
    )
    if not reply.HasField("admission") and not as_json:
        click.echo(f"namespace {namespace}: no admission policy (every start is admitted)")
        return
    _print(reply, as_json, _rows(reply.admission), _HEADERS)


@admission.command("remove")
@namespace_option
@address_option
@json_option
def admission_remove(namespace: str, address: str, as_json: bool) -> None:
    """Removes the policy; every waiting run is admitted. Idempotent."""
    request = pb.RemoveNamespaceAdmissionRequest(namespace=namespace)
    reply: pb.RemoveNamespaceAdmissionResponse = _call(
        address, lambda c: c.call(c.admin_service.RemoveNamespaceAdmission, request)
    )
    if as_json:
        _print(reply, as_json, [], _HEADERS)
    else:
        click.echo(f"namespace {namespace}: no admission policy")
