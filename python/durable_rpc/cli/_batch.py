"""``durable-rpc workflow batch cancel|terminate|signal``: act on every open run a list
query matches, at a bounded rate, with live progress and the final counts."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import click
from rich.console import Console

from durable_rpc.cli._admin import parse_duration_ms
from durable_rpc.client import Client, default_address
from durable_rpc.client._batch import Progress
from durable_rpc.errors import DurableRpcError

#: Progress goes to stderr: stdout holds only the final counts (plain or --json).
_progress_console = Console(stderr=True)

Start = Callable[[Client, str, Callable[[Progress], None]], Awaitable[Progress]]


def _options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option(
                "--query",
                required=True,
                help="List query of the runs, e.g. 'WorkflowType = \"Order\"' (required).",
            ),
            click.option(
                "--rate",
                type=click.IntRange(1, 1000),
                default=50,
                show_default=True,
                help="Most runs acted on per second.",
            ),
            click.option(
                "--batch-id",
                default=None,
                help="Names the batch; re-run with the same id to resume it (signals are "
                "delivered once per batch id and run). Default: random, printed.",
            ),
            click.option(
                "--address",
                default=default_address,
                show_default="$DURABLE_RPC_ADDRESS or 127.0.0.1:7233",
                help="HOST:PORT of the durable-rpc server.",
            ),
            click.option(
                "--namespace", default="default", show_default=True, help="Namespace of the runs."
            ),
            click.option("--json", "as_json", is_flag=True, help="Print the final counts as JSON."),
        ]
    ):
        fn = option(fn)
    return fn


def _counts(p: Progress) -> dict[str, Any]:
    return {
        "matched": p.matched,
        "applied": p.applied,
        "skipped": p.skipped,
        "failed": p.failed,
        "last_error": p.last_error,
    }


def _line(p: Progress) -> str:
    return f"matched {p.matched}, applied {p.applied}, skipped {p.skipped}, failed {p.failed}"


def _run(
    action: str, address: str, namespace: str, batch_id: str | None, as_json: bool, start: Start
) -> None:
    batch_id = batch_id or uuid.uuid4().hex

    async def go() -> Progress:
        async with await Client.connect(address, namespace=namespace) as client:
            with _progress_console.status(f"{action} batch {batch_id}: starting") as status:

                def show(p: Progress) -> None:
                    status.update(f"{action} batch {batch_id}: {_line(p)}")

                return await start(client, batch_id, show)

    try:
        final = asyncio.run(go())
    except DurableRpcError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"batch_id": batch_id, **_counts(final)}, indent=2))
        return
    click.echo(f"{action} batch {batch_id}: {_line(final)}")
    if final.last_error:
        click.echo(f"last error: {final.last_error}")


@click.group()
def batch() -> None:
    """Cancel, terminate or signal every open run matching a list query."""


@batch.command()
@click.option("--reason", default="", help="Recorded with each cancellation.")
@click.option(
    "--cleanup-timeout",
    default=None,
    help="How long each run may clean up (90s, 30m, 12h...): still open then, the server "
    "terminates it (CLEANUP_DEADLINE_EXCEEDED). Default: no bound.",
)
@_options
def cancel(
    query: str,
    reason: str,
    cleanup_timeout: str | None,
    rate: int,
    batch_id: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Ask every open run matching --query to cancel."""
    bound = None
    if cleanup_timeout is not None:
        bound = dt.timedelta(milliseconds=parse_duration_ms(cleanup_timeout))
    _run(
        "cancel",
        address,
        namespace,
        batch_id,
        as_json,
        lambda c, b, show: c.batch_cancel(
            query,
            reason=reason,
            cleanup_timeout=bound,
            batch_id=b,
            max_per_second=rate,
            on_progress=show,
        ),
    )


@batch.command()
@click.option("--reason", default="", help="Recorded with each termination.")
@_options
def terminate(
    query: str,
    reason: str,
    rate: int,
    batch_id: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Terminate every open run matching --query."""
    _run(
        "terminate",
        address,
        namespace,
        batch_id,
        as_json,
        lambda c, b, show: c.batch_terminate(
            query, reason=reason, batch_id=b, max_per_second=rate, on_progress=show
        ),
    )


@batch.command()
@click.argument("signal_name")
@click.option("--input", "input_json", default="[]", help="JSON array of arguments.")
@_options
def signal(
    signal_name: str,
    input_json: str,
    query: str,
    rate: int,
    batch_id: str | None,
    address: str,
    namespace: str,
    as_json: bool,
) -> None:
    """Send SIGNAL_NAME to every open run matching --query (once per run and batch id)."""
    try:
        args = json.loads(input_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--input") from None
    if not isinstance(args, list):
        args = [args]
    _run(
        "signal",
        address,
        namespace,
        batch_id,
        as_json,
        lambda c, b, show: c.batch_signal(
            query, signal_name, *args, batch_id=b, max_per_second=rate, on_progress=show
        ),
    )
