"""Entry point and the command group; each command family lives in its own module."""

from __future__ import annotations

import click

from durable_rpc.cli._selfcheck import selfcheck


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="durable-rpc")
def cli() -> None:
    """durable-rpc: a durable workflow engine with a gRPC API."""


cli.add_command(selfcheck)


def main() -> None:
    cli()
