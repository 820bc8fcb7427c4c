"""``durable-rpc task-queue limit set|remove|list``: a task queue's limit on concurrent
activity attempts, cluster-wide (AdminService.SetTaskQueueLimit / ListTaskQueueLimits, an
admin key in ``DURABLE_RPC_API_KEY``)."""

from __future__ import annotations

import click

from durable_rpc.cli._admin import _call, _print, _time, address_option, json_option
from durable_rpc.v1 import admin_service_pb2 as pb

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace of the queue."
)
_HEADERS = ["queue", "max concurrent activities", "updated"]


def _rows(limits: list[pb.TaskQueueLimit]) -> list[list[str]]:
    return [
        [
            limit.task_queue,
            str(limit.max_concurrent_activities),
            _time(limit.update_time, limit.HasField("update_time")),
        ]
        for limit in limits
    ]


def _set(address: str, namespace: str, queue: str, maximum: int) -> pb.SetTaskQueueLimitResponse:
    request = pb.SetTaskQueueLimitRequest(
        namespace=namespace, task_queue=queue, max_concurrent_activities=maximum
    )
    reply: pb.SetTaskQueueLimitResponse = _call(
        address, lambda c: c.call(c.admin_service.SetTaskQueueLimit, request)
    )
    return reply


@click.group("limit")
def limit() -> None:
    """A task queue's limit on activity attempts running at once (every worker, every
    server replica): claims over it wait, they never fail."""


@limit.command("set")
@click.argument("queue")
@click.argument("max_concurrent_activities", type=click.IntRange(min=1))
@namespace_option
@address_option
@json_option
def limit_set(
    queue: str, max_concurrent_activities: int, namespace: str, address: str, as_json: bool
) -> None:
    """At most MAX_CONCURRENT_ACTIVITIES activity attempts of QUEUE leased at once."""
    reply = _set(address, namespace, queue, max_concurrent_activities)
    _print(reply, as_json, _rows([reply.limit]), _HEADERS)


@limit.command("remove")
@click.argument("queue")
@namespace_option
@address_option
@json_option
def limit_remove(queue: str, namespace: str, address: str, as_json: bool) -> None:
    """QUEUE's activities are no longer limited. Idempotent."""
    reply = _set(address, namespace, queue, 0)
    if as_json:
        _print(reply, as_json, [], _HEADERS)
    else:
        click.echo(f"task queue {queue}: no limit")


@limit.command("list")
@namespace_option
@address_option
@json_option
def limit_list(namespace: str, address: str, as_json: bool) -> None:
    """The namespace's task-queue limits."""
    request = pb.ListTaskQueueLimitsRequest(namespace=namespace)
    reply: pb.ListTaskQueueLimitsResponse = _call(
        address, lambda c: c.call(c.admin_service.ListTaskQueueLimits, request)
    )
    _print(reply, as_json, _rows(list(reply.limits)), _HEADERS)
