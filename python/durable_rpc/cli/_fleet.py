"""``durable-rpc worker list`` and ``durable-rpc task-queue list|describe``: the fleet as
the server sees it (AdminService.ListWorkers / ListTaskQueues / DescribeTaskQueue, an
admin key in ``DURABLE_RPC_API_KEY``). Counters are as of each worker's last heartbeat."""

from __future__ import annotations

import json

import click
from google.protobuf import json_format
from rich.table import Table

from durable_rpc.cli._admin import _call, _print, _time, address_option, console, json_option
from durable_rpc.v1 import admin_service_pb2 as pb

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace of the workers."
)

#: Short headers: eleven columns fit a 120-column terminal.
_WORKER_HEADERS = [
    "worker",
    "queue",
    "build",
    "live",
    "last heartbeat",
    "claims",
    "completed",
    "failed",
    "leases lost",
    "slots",
    "definitions",
]


def _definitions(worker: pb.WorkerInfo) -> str:
    return ", ".join(f"{d.name}@{d.version}" for d in worker.definitions) or "-"


def _worker_rows(workers: list[pb.WorkerInfo]) -> list[list[str]]:
    return [
        [
            w.worker_id,
            w.task_queue,
            w.build_id or "-",
            "yes" if w.live else "no",
            _time(w.last_heartbeat_time, w.HasField("last_heartbeat_time")),
            str(w.counters.claims),
            str(w.counters.completions),
            str(w.counters.failures),
            str(w.counters.lease_losses),
            f"{w.counters.slots_in_use}/{w.counters.slots_total}",
            _definitions(w),
        ]
        for w in workers
    ]


@click.group()
def worker() -> None:
    """See the registered workers."""


@worker.command("list")
@click.option("--task-queue", default="", help="Only the workers of this task queue.")
@click.option(
    "--all",
    "include_dead",
    is_flag=True,
    help="Also workers whose heartbeat stopped (not deregistered).",
)
@namespace_option
@address_option
@json_option
def worker_list(
    task_queue: str, include_dead: bool, namespace: str, address: str, as_json: bool
) -> None:
    """Live workers (with --all, also dead ones) with what they counted so far."""
    request = pb.ListWorkersRequest(
        namespace=namespace, task_queue=task_queue, include_dead=include_dead
    )
    reply = _call(address, lambda c: c.call(c.admin_service.ListWorkers, request))
    _print(reply, as_json, _worker_rows(list(reply.workers)), _WORKER_HEADERS)


@click.group("task-queue")
def task_queue() -> None:
    """See a task queue: backlog, pollers, definitions served."""


def _age(backlog: pb.TaskQueueBacklog) -> str:
    if not backlog.HasField("oldest_queued_age"):
        return "-"
    return f"{backlog.oldest_queued_age.ToMilliseconds() / 1000:.1f}s"


@task_queue.command("list")
@namespace_option
@address_option
@json_option
def task_queue_list(namespace: str, address: str, as_json: bool) -> None:
    """Every queue with open tasks or registered workers: backlog, oldest, workers."""
    request = pb.ListTaskQueuesRequest(namespace=namespace)
    reply = _call(address, lambda c: c.call(c.admin_service.ListTaskQueues, request))
    rows = [
        [
            q.task_queue,
            str(q.workflow_queued),
            str(q.activity_queued),
            str(q.open_tasks),
            _time(q.oldest_queued_time, q.HasField("oldest_queued_time")),
            f"{q.live_workers}/{q.workers}",
        ]
        for q in reply.task_queues
    ]
    headers = ["queue", "workflows queued", "activities queued", "open", "oldest queued"]
    _print(reply, as_json, rows, [*headers, "live/workers"])
    if reply.truncated and not as_json:
        console.print("(more queues than one list shows: the first 1000 by name)")


@task_queue.command("describe")
@click.argument("queue")
@namespace_option
@address_option
@json_option
def task_queue_describe(queue: str, namespace: str, address: str, as_json: bool) -> None:
    """QUEUE's open tasks by kind and state, its live workers and what they serve."""
    request = pb.DescribeTaskQueueRequest(namespace=namespace, task_queue=queue)
    reply = _call(address, lambda c: c.call(c.admin_service.DescribeTaskQueue, request))
    if as_json:
        click.echo(json.dumps(json_format.MessageToDict(reply), indent=2))
        return
    backlog = Table(
        "kind", "queued", "leased", "waiting", "recoverable", "oldest queued", "age",
        title=f"task queue {reply.task_queue}: backlog",
    )  # fmt: skip
    for b in reply.backlog:
        backlog.add_row(
            b.kind,
            str(b.queued),
            str(b.leased),
            str(b.waiting),
            str(b.recoverable),
            _time(b.oldest_queued_time, b.HasField("oldest_queued_time")),
            _age(b),
        )
    console.print(backlog)
    for b in reply.backlog:
        if len(b.queued_by_priority) > 1:  # one priority is the table's queued column
            by_priority = ", ".join(f"{p}: {n}" for p, n in sorted(b.queued_by_priority.items()))
            console.print(f"{b.kind} tasks queued by priority: {by_priority}")
    if reply.HasField("limit"):
        console.print(
            f"activity limit: {reply.activities_in_use} of "
            f"{reply.limit.max_concurrent_activities} attempts in use"
        )
    for r in reply.rate_limits:
        # Namespace-wide: every one applies to this queue's attempts of its key or type.
        scope = "activity type" if r.scope == pb.RATE_LIMIT_SCOPE_ACTIVITY_TYPE else "key"
        console.print(
            f"rate limit ({scope} {r.name}): {r.permits} per {r.period.ToMilliseconds()} ms, "
            f"burst {r.burst}, next token "
            f"{_time(r.next_token_time, r.HasField('next_token_time'))}"
        )
    pollers = Table("worker", "build", "last heartbeat", "slots", title="pollers (live workers)")
    for p in reply.pollers:
        pollers.add_row(
            p.worker_id,
            p.build_id or "-",
            _time(p.last_heartbeat_time, p.HasField("last_heartbeat_time")),
            f"{p.slots_in_use}/{p.slots_total}",
        )
    console.print(pollers)
    served = Table("name", "version", "fingerprint", "builds", "live workers", title="definitions")
    for d in reply.definitions:
        served.add_row(
            d.name,
            d.version,
            d.fingerprint[:12],
            ", ".join(b or "(unversioned)" for b in d.build_ids),
            str(d.live_workers),
        )
    console.print(served)
