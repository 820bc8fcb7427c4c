"""``durable-rpc workflow ...``: start, inspect and drive runs from a shell."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from google.protobuf import json_format
from rich.console import Console
from rich.table import Table

from durable_rpc.cli._admin import parse_duration_ms
from durable_rpc.cli._batch import batch
from durable_rpc.cli._codec import AsStored, ShownCodec, operator_keys
from durable_rpc.cli._render import failure_dict, failure_line, message_dict
from durable_rpc.cli._render import plain as _plain
from durable_rpc.client import (
    Client,
    WorkflowCancelledError,
    WorkflowCounts,
    WorkflowDescription,
    WorkflowFailureError,
    WorkflowOutcomeError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
    WorkflowUpdateFailedError,
    default_address,
)
from durable_rpc.codec import PayloadCodec
from durable_rpc.errors import DurableRpcError
from durable_rpc.run_statuses import STATUSES
from durable_rpc.v1 import history_pb2, service_pb2

T = TypeVar("T")
console = Console()


def _run(
    address: str,
    namespace: str,
    action: Callable[[Client], Awaitable[T]],
    *,
    codec: PayloadCodec | None = None,
) -> T:
    """``action`` on a client of ``address``; encrypted payloads it reads come back as
    ``<encrypted: key k1>`` (``codec=AsStored()``: as they are, for a history the CLI
    renders or exports itself)."""
    operator_keys()  # a key file that cannot be used stops the command before any call

    async def go() -> T:
        client = await Client.connect(
            address, namespace=namespace, payload_codec=codec or ShownCodec()
        )
        try:
            return await action(client)
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except DurableRpcError as exc:
        raise click.ClickException(str(exc)) from None
    except (WorkflowOutcomeError, WorkflowUpdateFailedError) as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, dt.datetime):
        return obj.isoformat()
    raise TypeError(type(obj).__name__)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=_json_default))


common = [
    click.option(
        "--address",
        default=default_address,
        show_default="$DURABLE_RPC_ADDRESS or 127.0.0.1:7233",
        help="HOST:PORT of the durable-rpc server.",
    ),
    click.option(
        "--namespace", default="default", show_default=True, help="Namespace the run lives in."
    ),
    click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table."),
]


#: The options of every command that may start a run (start, signal- and update-with-start).
start_options = [
    click.option(
        "--id", "workflow_id", required=True, help="Workflow id (unique among open runs)."
    ),
    click.option("--task-queue", required=True, help="Task queue the workers poll."),
    click.option("--input", "input_json", default="[]", help="JSON array: the start arguments."),
    click.option(
        "--version", default="1", show_default=True, help="Workflow definition version to run."
    ),
]


def _with(options: list[Callable[[Any], Any]]) -> Callable[[Callable[..., Any]], Any]:
    def decorate(fn: Callable[..., Any]) -> Any:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


with_common = _with(common)
run_id_option = click.option(
    "--run-id", default=None, help="One run of the workflow id (default: its latest run)."
)
with_start_options = _with(start_options)


@click.group()
def workflow() -> None:
    """Start, inspect and drive workflow runs."""


workflow.add_command(batch)


@workflow.command()
@click.argument("workflow_type")
@with_start_options
@click.option("--request-id", default=None, help="Idempotency key (default: random).")
@click.option(
    "--priority",
    type=int,
    default=None,
    help="Claim priority of the run's tasks: 1 (most urgent) .. 5 (default 3).",
)
@click.option(
    "--fairness-key",
    default=None,
    help="Share claims of a priority fairly among keys (e.g. a tenant id).",
)
@with_common
def start(
    workflow_type: str,
    workflow_id: str,
    task_queue: str,
    input_json: str,
    version: str,
    request_id: str | None,
    priority: int | None,
    fairness_key: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Start a run of WORKFLOW_TYPE."""
    args = _json_args(input_json)
    handle = _run(
        address,
        namespace,
        lambda c: c.start_workflow(
            workflow_type,
            *args,
            id=workflow_id,
            task_queue=task_queue,
            version=version,
            request_id=request_id,
            priority=priority,
            fairness_key=fairness_key,
        ),
    )
    if as_json:
        _emit_json({"workflow_id": handle.workflow_id, "run_id": handle.run_id})
    else:
        console.print(f"started [bold]{handle.workflow_id}[/] run {handle.run_id}")


@workflow.command()
@click.argument("workflow_id")
@run_id_option
@click.option("--verbose", "-v", is_flag=True, help="Include failures' stack traces.")
@with_common
def describe(
    workflow_id: str,
    run_id: str | None,
    verbose: bool,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Show a run's status, pending activities and last workflow-task failure."""
    d = _run(address, namespace, lambda c: c.get_handle(workflow_id, run_id).describe())
    failure = d.last_workflow_task_failure
    data = {
        **dataclasses.asdict(d.info),
        "definition_available": d.definition_available,
        "definition_unavailable_reason": d.definition_unavailable_reason or None,
        "stuck_reason": d.stuck_reason or None,
        "workflow_task_attempt": d.workflow_task_attempt,
        "last_workflow_task_failure": (
            failure_dict(failure, stack=verbose) if failure is not None else None
        ),
        "pending_activities": [message_dict(a, stack=verbose) for a in d.pending_activities],
        "redriven_from_run_id": d.redriven_from_run_id or None,
        "redriven_by_run_id": d.redriven_by_run_id or None,
        "priority": d.priority,
        "fairness_key": d.fairness_key or None,
    }
    if as_json:
        _emit_json(data)
        return
    rows = {
        **{k: v for k, v in data.items() if k not in _DESCRIBE_IN_WORDS},
        "definition": _definition_in_words(d),
        "last_workflow_task_failure": failure_line(failure) if failure is not None else None,
    }
    table = Table(show_header=False, box=None)
    for key, value in rows.items():
        table.add_row(f"[bold]{key}[/]", str(value if value is not None else "-"))
    console.print(table)
    if verbose and failure is not None and failure.stack_trace:
        console.print("[bold]last workflow task failure's stack trace[/]")
        console.print(failure.stack_trace, markup=False, highlight=False)


#: describe's fields that its table shows in words instead of as raw values.
_DESCRIBE_IN_WORDS = (
    "definition_available",
    "definition_unavailable_reason",
    "last_workflow_task_failure",
)


def _definition_in_words(d: WorkflowDescription) -> str:
    if d.definition_available:
        return "available: a live worker on the task queue registers this run's definition"
    if d.definition_unavailable_reason:
        return d.definition_unavailable_reason
    return "no live worker registers it (no matter: the run is closed)"


def _event_summary(event: history_pb2.HistoryEvent) -> tuple[str, str]:
    kind = event.WhichOneof("attributes") or "unknown"
    details = message_dict(getattr(event, kind), stack=False) if kind != "unknown" else {}
    return kind, json.dumps(details, default=str)


@workflow.command()
@click.argument("workflow_id")
@run_id_option
@click.option(
    "--export",
    "export_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the history as protobuf JSON to this file (for replay tests).",
)
@click.option(
    "--raw", is_flag=True, help="With --json: payloads as their base64 frames, not decoded."
)
@with_common
def history(
    workflow_id: str,
    run_id: str | None,
    export_path: str | None,
    raw: bool,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Print a run's event history (with --json: payloads decoded to values)."""
    events = _run(
        address,
        namespace,
        lambda c: c.get_handle(workflow_id, run_id).history(),
        codec=AsStored(),  # exported as stored: a holder of the key can replay it
    )
    full = history_pb2.History(events=events)
    if export_path:
        with open(export_path, "w") as fh:
            fh.write(json_format.MessageToJson(full))
        console.print(f"wrote {len(events)} events to {export_path}")
        return
    if as_json:
        if raw:
            click.echo(json_format.MessageToJson(full))
        else:
            _emit_json({"events": [message_dict(e, stack=True) for e in events]})
        return
    table = Table("id", "time", "event", "details")
    for event in events:
        kind, details = _event_summary(event)
        when = event.event_time.ToDatetime(tzinfo=dt.UTC).strftime("%H:%M:%S.%f")[:-3]
        table.add_row(str(event.event_id), when, kind, details)
    console.print(table)


@workflow.command()
@click.argument("workflow_id")
@run_id_option
@click.option("--timeout", type=float, default=None, help="Seconds to wait (default: forever).")
@with_common
def result(
    workflow_id: str,
    run_id: str | None,
    timeout: float | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Wait for a run to close and print its result (exit 2 if it did not complete).

    With --json every outcome is one JSON object on stdout: {"status": "completed",
    "result": ...}, or the status (failed, cancelled, terminated, timed_out) with the
    run id and, for a failure, its type and message."""
    if not as_json:
        value = _run(
            address, namespace, lambda c: c.get_handle(workflow_id, run_id).result(timeout=timeout)
        )
        console.print_json(data=_plain(value))
        return

    async def outcome(c: Client) -> dict[str, Any]:
        try:
            value = await c.get_handle(workflow_id, run_id).result(timeout=timeout)
        except WorkflowOutcomeError as exc:
            return _outcome_json(exc)
        return {"workflow_id": workflow_id, "status": "completed", "result": _plain(value)}

    data = _run(address, namespace, outcome)
    _emit_json(data)
    if data["status"] != "completed":
        sys.exit(2)


#: The status each way of closing without a result is reported as.
_OUTCOME_STATUS: tuple[tuple[type[WorkflowOutcomeError], str], ...] = (
    (WorkflowFailureError, "failed"),
    (WorkflowCancelledError, "cancelled"),
    (WorkflowTerminatedError, "terminated"),
    (WorkflowTimedOutError, "timed_out"),
)


def _outcome_json(exc: WorkflowOutcomeError) -> dict[str, Any]:
    status = next((name for kind, name in _OUTCOME_STATUS if isinstance(exc, kind)), "closed")
    data: dict[str, Any] = {"workflow_id": exc.workflow_id, "run_id": exc.run_id, "status": status}
    if isinstance(exc, WorkflowFailureError):
        data["failure"] = failure_dict(exc.failure, stack=False)
    else:
        data["message"] = str(exc)
    return data


@workflow.command()
@click.argument("workflow_id")
@click.argument("signal_name")
@click.option("--input", "input_json", default="[]", help="JSON array of arguments.")
@run_id_option
@click.option("--request-id", default=None, help="Deduplication key.")
@with_common
def signal(
    workflow_id: str,
    signal_name: str,
    input_json: str,
    run_id: str | None,
    request_id: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Send SIGNAL_NAME to a run."""
    args = json.loads(input_json)
    if not isinstance(args, list):
        args = [args]
    delivered = _run(
        address,
        namespace,
        lambda c: c.get_handle(workflow_id, run_id).signal(
            signal_name, *args, request_id=request_id
        ),
    )
    if as_json:
        _emit_json({"delivered": delivered})
    else:
        console.print("delivered" if delivered else "already delivered (same request id)")


def _json_args(text: str) -> list[Any]:
    args = json.loads(text)
    return args if isinstance(args, list) else [args]


@workflow.command()
@click.argument("workflow_id")
@click.argument("query_name")
@click.option("--input", "input_json", default="[]", help="JSON array of arguments.")
@run_id_option
@click.option("--timeout", type=float, default=None, help="Seconds to wait for a worker.")
@with_common
def query(
    workflow_id: str,
    query_name: str,
    input_json: str,
    run_id: str | None,
    timeout: float | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Ask QUERY_NAME of a run: a worker replays it and calls the handler; nothing is
    recorded. Prints the answer as JSON (with --json: {"result": ...})."""
    args = _json_args(input_json)
    answer = _run(
        address,
        namespace,
        lambda c: c.get_handle(workflow_id, run_id).query(query_name, *args, timeout=timeout),
    )
    # By name, without a type hint: the answer is a plain decoded value.
    result = _plain(answer)
    _emit_json({"result": result} if as_json else result)


@workflow.command()
@click.argument("workflow_id")
@click.argument("update_name")
@click.option("--input", "input_json", default="[]", help="JSON array of arguments.")
@run_id_option
@click.option("--update-id", default=None, help="Deduplication key (default: random).")
@click.option(
    "--timeout", type=float, default=None, help="Seconds to wait (default: as long as it takes)."
)
@with_common
def update(
    workflow_id: str,
    update_name: str,
    input_json: str,
    run_id: str | None,
    update_id: str | None,
    timeout: float | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Send UPDATE_NAME to a run and wait for its handler: prints its result as JSON
    (with --json: {"result": ...}). A rejected update fails with UPDATE_REJECTED, a
    failed handler exits 2 with its failure."""
    args = _json_args(input_json)
    result = _run(
        address,
        namespace,
        lambda c: c.get_handle(workflow_id, run_id).execute_update(
            update_name, *args, update_id=update_id, timeout=timeout
        ),
    )
    _emit_json({"result": _plain(result)} if as_json else _plain(result))


@workflow.command(name="update-with-start")
@click.argument("workflow_type")
@click.argument("update_name")
@with_start_options
@click.option("--update-input", "update_json", default="[]", help="JSON array: update args.")
@click.option("--update-id", default=None, help="Deduplication key (default: random).")
@click.option(
    "--timeout", type=float, default=None, help="Seconds to wait (default: as long as it takes)."
)
@with_common
def update_with_start(
    workflow_type: str,
    update_name: str,
    workflow_id: str,
    task_queue: str,
    input_json: str,
    update_json: str,
    version: str,
    update_id: str | None,
    timeout: float | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Send UPDATE_NAME to the open run of --id, starting WORKFLOW_TYPE first if none is;
    wait for its handler and print its result as JSON (with --json, also the run)."""

    async def go(client: Client) -> tuple[str | None, Any]:
        handle = await client.start_update_with_start(
            workflow_type,
            *_json_args(input_json),
            id=workflow_id,
            task_queue=task_queue,
            update=update_name,
            update_args=_json_args(update_json),
            update_id=update_id,
            wait_for="completed",
            timeout=timeout,
            version=version,
        )
        return handle.workflow_handle.run_id, await handle.result(timeout=timeout)

    run_id, result = _run(address, namespace, go)
    if as_json:
        _emit_json({"workflow_id": workflow_id, "run_id": run_id, "result": _plain(result)})
    else:
        _emit_json(_plain(result))


@workflow.command(name="signal-with-start")
@click.argument("workflow_type")
@click.argument("signal_name")
@with_start_options
@click.option("--signal-input", "signal_json", default="[]", help="JSON array: signal args.")
@click.option("--request-id", default=None, help="Deduplication key (default: random).")
@with_common
def signal_with_start(
    workflow_type: str,
    signal_name: str,
    workflow_id: str,
    task_queue: str,
    input_json: str,
    signal_json: str,
    version: str,
    request_id: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Send SIGNAL_NAME to the open run of --id, starting WORKFLOW_TYPE first if none is."""
    handle = _run(
        address,
        namespace,
        lambda c: c.signal_with_start_workflow(
            workflow_type,
            *_json_args(input_json),
            id=workflow_id,
            task_queue=task_queue,
            signal=signal_name,
            signal_args=_json_args(signal_json),
            version=version,
            request_id=request_id,
        ),
    )
    if as_json:
        _emit_json({"workflow_id": handle.workflow_id, "run_id": handle.run_id})
    else:
        console.print(f"signalled [bold]{handle.workflow_id}[/] run {handle.run_id}")


@workflow.command()
@click.argument("workflow_id")
@run_id_option
@click.option("--reason", default="", help="Why, recorded in the run's history.")
@click.option(
    "--cleanup-timeout",
    default=None,
    help="How long the run may clean up (90s, 30m, 12h...): still open then, the server "
    "terminates it (CLEANUP_DEADLINE_EXCEEDED). Default: no bound.",
)
@with_common
def cancel(
    workflow_id: str,
    run_id: str | None,
    reason: str,
    cleanup_timeout: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Request cancellation of a run."""
    bound = None
    if cleanup_timeout is not None:
        bound = dt.timedelta(milliseconds=parse_duration_ms(cleanup_timeout))
    _run(
        address,
        namespace,
        lambda c: c.get_handle(workflow_id, run_id).cancel(reason, cleanup_timeout=bound),
    )
    _emit_json({"cancel_requested": True}) if as_json else console.print("cancel requested")


@workflow.command()
@click.argument("workflow_id")
@run_id_option
@click.option("--reason", default="", help="Why, recorded in the run's history.")
@with_common
def terminate(
    workflow_id: str,
    run_id: str | None,
    reason: str,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Terminate a run now."""
    _run(address, namespace, lambda c: c.get_handle(workflow_id, run_id).terminate(reason))
    _emit_json({"terminated": True}) if as_json else console.print("terminated")


@workflow.command()
@click.argument("workflow_id")
@click.option(
    "--run-id", default=None, help="The failed run (default: the workflow id's latest run)."
)
@click.option("--request-id", default=None, help="Deduplication key (default: random).")
@with_common
def redrive(
    workflow_id: str,
    run_id: str | None,
    request_id: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Start a new run continuing a failed run from its last completed activity (their
    results replay: no completed activity runs again)."""
    done = _run(
        address,
        namespace,
        lambda c: c.get_handle(workflow_id, run_id).redrive(request_id=request_id),
    )
    data = {
        "workflow_id": done.handle.workflow_id,
        "run_id": done.handle.run_id,
        "resumed_after_event_id": done.resumed_after_event_id,
        "kept_activities": done.kept_activities,
        "started": done.started,
    }
    if as_json:
        _emit_json(data)
        return
    verb = "redrove" if done.started else "already redriven as"
    console.print(
        f"{verb} [bold]{done.handle.workflow_id}[/] run {done.handle.run_id}: resumed after "
        f"event {done.resumed_after_event_id}, {done.kept_activities} completed "
        "activities kept"
    )


_STATUSES = list(STATUSES)
_status_option = click.option(
    "--status", type=click.Choice(_STATUSES), default=None, help="Only runs with this status."
)
_type_option = click.option(
    "--type", "workflow_type", default="", help="Only runs of this workflow type."
)
_query_option = click.option(
    "--query",
    "-q",
    default="",
    help='Filter, e.g. \'WorkflowType = "Order" AND CustomerId = "c-1" AND Amount > 100\'.',
)


def _status_number(status: str | None) -> int:
    return service_pb2.WorkflowStatus.Value(f"WORKFLOW_STATUS_{status.upper()}") if status else 0


@workflow.command(name="list")
@_status_option
@_type_option
@_query_option
@click.option("--limit", type=int, default=100, show_default=True, help="Most runs listed.")
@with_common
def list_(
    status: str | None,
    workflow_type: str,
    query: str,
    limit: int,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """List runs, newest first."""
    number = _status_number(status)

    async def collect(c: Client) -> list[Any]:
        rows = []
        async for info in c.list_workflows(query, status=number, workflow_type=workflow_type):
            rows.append(info)
            if len(rows) >= limit:
                break
        return rows

    rows = _run(address, namespace, collect)
    if as_json:
        _emit_json([dataclasses.asdict(r) for r in rows])
        return
    table = Table("workflow id", "type", "status", "started", "run id")
    for r in rows:
        started = r.start_time.strftime("%Y-%m-%d %H:%M:%S") if r.start_time else "-"
        table.add_row(r.workflow_id, r.workflow_type, r.status, started, r.run_id)
    console.print(table)


@workflow.command(name="count")
@_status_option
@_type_option
@_query_option
@with_common
def count(
    status: str | None,
    workflow_type: str,
    query: str,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Count the runs `workflow list` would list, by status (exact, in one call)."""
    number = _status_number(status)

    async def counted(c: Client) -> WorkflowCounts:
        return await c.count_workflows(query, status=number, workflow_type=workflow_type)

    counts = _run(address, namespace, counted)
    if as_json:
        _emit_json({"by_status": dict(counts.by_status), "total": counts.total})
        return
    table = Table("status", "runs")
    for name in _STATUSES:
        if counts[name]:
            table.add_row(name, str(counts[name]))
    table.add_row("total", str(counts.total))
    console.print(table)
