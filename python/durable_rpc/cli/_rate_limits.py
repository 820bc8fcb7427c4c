"""``durable-rpc task-queue rate-limit set|remove|list``: a namespace's rate limits on
activity claims, per named downstream (an activity's rate_limit_key) or per activity type
(AdminService.SetRateLimit / ListRateLimits / RemoveRateLimit, an admin key in
``DURABLE_RPC_API_KEY``)."""

from __future__ import annotations

import re

import click
from google.protobuf import duration_pb2

from durable_rpc.cli._admin import _call, _print, _time, address_option, json_option
from durable_rpc.errors import InvalidRateLimitError
from durable_rpc.v1 import admin_service_pb2 as pb

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace of the limit."
)
type_option = click.option(
    "--activity-type",
    "by_type",
    is_flag=True,
    help="NAME is an activity type (its attempts scheduled without a rate_limit_key), "
    "not a rate_limit_key.",
)
_HEADERS = ["scope", "name", "rate", "burst", "next token", "updated"]
_UNITS_MS = {
    "ms": 1,
    "s": 1_000,
    "sec": 1_000,
    "second": 1_000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
}
_RATE = re.compile(r"(-?\d+)/(\d*)([a-z]+)")
_SCOPE_NAMES = {pb.RATE_LIMIT_SCOPE_KEY: "key", pb.RATE_LIMIT_SCOPE_ACTIVITY_TYPE: "type"}


def parse_rate(text: str) -> tuple[int, int]:
    """``PERMITS/[N]UNIT`` (``60/min``, ``5/s``, ``100/10s``, ``3/500ms``) as (permits,
    period in ms). InvalidRateLimitError (reason INVALID_RATE_LIMIT) otherwise; the
    server checks the ranges."""
    match = _RATE.fullmatch(text.strip().lower())
    if match is None or match.group(3) not in _UNITS_MS:
        raise InvalidRateLimitError(
            f"rate {text!r} is not PERMITS/[N]UNIT (e.g. 60/min, 5/s, 100/10s; "
            f"units {', '.join(_UNITS_MS)})"
        )
    count = int(match.group(2) or "1")
    return int(match.group(1)), count * _UNITS_MS[match.group(3)]


def _period(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if ms % size == 0:
            count = ms // size
            return unit if count == 1 else f"{count}{unit}"
    return f"{ms}ms"


def _rows(limits: list[pb.RateLimit]) -> list[list[str]]:
    return [
        [
            _SCOPE_NAMES.get(limit.scope, "?"),
            limit.name,
            f"{limit.permits}/{_period(limit.period.ToMilliseconds())}",
            str(limit.burst),
            _time(limit.next_token_time, limit.HasField("next_token_time")),
            _time(limit.update_time, limit.HasField("update_time")),
        ]
        for limit in limits
    ]


def _scope(by_type: bool) -> pb.RateLimitScope.ValueType:
    return pb.RATE_LIMIT_SCOPE_ACTIVITY_TYPE if by_type else pb.RATE_LIMIT_SCOPE_KEY


@click.group("rate-limit")
def rate_limit() -> None:
    """A namespace's rate limits on activity attempts (every queue, worker and server
    replica): a claim with no token waits, it never fails."""


@rate_limit.command("set")
@click.argument("name")
@click.argument("rate")
@click.option(
    "--burst",
    type=int,
    default=0,
    help="Claims that may go at once after a quiet time (default: PERMITS).",
)
@type_option
@namespace_option
@address_option
@json_option
def rate_limit_set(
    name: str,
    rate: str,
    burst: int,
    by_type: bool,
    namespace: str,
    address: str,
    as_json: bool,
) -> None:
    """At most RATE activity attempts of NAME claimed (RATE is PERMITS/[N]UNIT: 60/min,
    5/s, 100/10s). NAME is a rate_limit_key (@activity.defn(rate_limit_key=...)), or
    with --activity-type an activity type. A set limit starts with a full bucket."""
    permits, period_ms = parse_rate(rate)
    if burst < 0:
        raise InvalidRateLimitError(f"burst must be at least 1, got {burst}")
    request = pb.SetRateLimitRequest(
        namespace=namespace,
        scope=_scope(by_type),
        name=name,
        permits=permits,
        period=duration_pb2.Duration(seconds=period_ms // 1000, nanos=period_ms % 1000 * 1_000_000),
        burst=burst,
    )
    reply: pb.SetRateLimitResponse = _call(
        address, lambda c: c.call(c.admin_service.SetRateLimit, request)
    )
    _print(reply, as_json, _rows([reply.rate_limit]), _HEADERS)


@rate_limit.command("remove")
@click.argument("name")
@type_option
@namespace_option
@address_option
@json_option
def rate_limit_remove(
    name: str, by_type: bool, namespace: str, address: str, as_json: bool
) -> None:
    """NAME's attempts are no longer rate limited (NOT_FOUND when it was not)."""
    request = pb.RemoveRateLimitRequest(namespace=namespace, scope=_scope(by_type), name=name)
    reply: pb.RemoveRateLimitResponse = _call(
        address, lambda c: c.call(c.admin_service.RemoveRateLimit, request)
    )
    if as_json:
        _print(reply, as_json, [], _HEADERS)
    else:
        click.echo(f"{'activity type' if by_type else 'key'} {name}: no rate limit")


@rate_limit.command("list")
@namespace_option
@address_option
@json_option
def rate_limit_list(namespace: str, address: str, as_json: bool) -> None:
    """The namespace's rate limits."""
    request = pb.ListRateLimitsRequest(namespace=namespace)
    reply: pb.ListRateLimitsResponse = _call(
        address, lambda c: c.call(c.admin_service.ListRateLimits, request)
    )
    _print(reply, as_json, _rows(list(reply.rate_limits)), _HEADERS)
