"""``durable-rpc replay FILE... --module my.workflows``: the deploy gate on the command line.

Replays exported histories against the workflow classes of the given modules and exits
1 if any of them no longer replays, printing the precise divergence (seq, expected,
actual), so CI can block a deploy that would break open runs.
"""

from __future__ import annotations

import importlib
import sys

import click

from durable_rpc.testing import Replayer
from durable_rpc.workflow._definition import definition_of


def _workflow_classes(module_name: str) -> list[type]:
    """Every ``@workflow.defn`` class defined or imported at the top of ``module_name``."""
    module = importlib.import_module(module_name)
    found: list[type] = []
    for value in vars(module).values():
        if not isinstance(value, type):
            continue
        try:
            definition_of(value)
        except TypeError:
            continue
        found.append(value)
    return found


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--module",
    "-m",
    "modules",
    multiple=True,
    required=True,
    help="Module holding the workflow classes (repeatable), e.g. my_app.workflows.",
)
def replay(files: tuple[str, ...], modules: tuple[str, ...]) -> None:
    """Replay exported histories (from `workflow history --export`) against current code."""
    sys.path.insert(0, "")  # like `python -m`: modules of the current directory import
    workflows = [cls for name in modules for cls in _workflow_classes(name)]
    if not workflows:
        raise click.ClickException(f"no @workflow.defn classes in {', '.join(modules)}")
    # Every result is printed, then the exit code says whether any failed.
    results = Replayer(workflows, raise_on_failure=False).replay_all(files)
    for result in results:
        click.echo(result.describe())
    failed = sum(not r.ok for r in results)
    click.echo(f"{len(results) - failed} replayed, {failed} failed")
    if failed:
        sys.exit(1)
