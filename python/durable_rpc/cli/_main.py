"""Entry point and the command group; each command family lives in its own module."""

from __future__ import annotations

import click

from durable_rpc.cli._admin import namespace, token
from durable_rpc.cli._replay import replay
from durable_rpc.cli._selfcheck import selfcheck
from durable_rpc.cli._server import server
from durable_rpc.cli._workflow import workflow


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="durable-rpc")
def cli() -> None:
    """durable-rpc: a durable workflow engine with a gRPC API."""


cli.add_command(replay)
cli.add_command(selfcheck)
cli.add_command(server)
cli.add_command(workflow)
cli.add_command(namespace)
cli.add_command(token)


def main() -> None:
    cli()
