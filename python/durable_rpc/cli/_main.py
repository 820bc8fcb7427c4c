"""Entry point and the command group; each command family lives in its own module."""

from __future__ import annotations

import os
from typing import Any

import click

from durable_rpc.cli._admin import namespace, token
from durable_rpc.cli._admission import admission
from durable_rpc.cli._budgets import budget
from durable_rpc.cli._definitions import definition
from durable_rpc.cli._errors import DEBUG_ENV, explain
from durable_rpc.cli._fleet import task_queue, worker
from durable_rpc.cli._limits import limit
from durable_rpc.cli._rate_limits import rate_limit
from durable_rpc.cli._replay import replay
from durable_rpc.cli._schedule import schedule
from durable_rpc.cli._selfcheck import selfcheck
from durable_rpc.cli._server import server
from durable_rpc.cli._sessions import session
from durable_rpc.cli._ui import ui
from durable_rpc.cli._workflow import workflow


class Cli(click.Group):
    """The group whose ``invoke`` turns every command's expected failure into one line."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click prints these itself
        except Exception as exc:
            message = explain(exc)
            if message is None or ctx.params.get("debug"):
                raise  # unexpected, or asked for: the traceback
            raise click.ClickException(message) from None


@click.group(cls=Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="durable-rpc")
@click.option(
    "--debug",
    is_flag=True,
    default=lambda: os.environ.get(DEBUG_ENV, "") not in ("", "0"),
    help=f"Show the Python traceback behind an error (also: {DEBUG_ENV}=1).",
)
def cli(debug: bool) -> None:
    """durable-rpc: a durable workflow engine with a gRPC API."""


cli.add_command(replay)
cli.add_command(selfcheck)
cli.add_command(server)
cli.add_command(workflow)
namespace.add_command(admission)
namespace.add_command(budget)
cli.add_command(namespace)
cli.add_command(token)
cli.add_command(worker)
task_queue.add_command(limit)
task_queue.add_command(rate_limit)
cli.add_command(task_queue)
cli.add_command(definition)
cli.add_command(schedule)
cli.add_command(session)
cli.add_command(ui)


def main() -> None:
    cli()
