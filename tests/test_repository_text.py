"""The repository speaks of the product only, and the CLI's help is plain text.

Docs, comments, docstrings, tests and scripts state what the product does: they name no
folder outside the checkout, no tracker item, no planning document and no development
session. ``durable-rpc ... --help`` is printed verbatim by click, so its text carries no
reStructuredText markup.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from durable_rpc.cli._main import cli
from tests.conftest import ROOT

# Generated from the protos (their comments are checked at the source) and test data.
SKIPPED_PREFIXES = ("python/durable_rpc/v1/", "tests/fixtures/")

# What text about the product never says. Each pattern is written so that its own source
# does not match it (a word split by a group or a class), so this file is scanned too.
FORBIDDEN = {
    "a folder outside the checkout": re.compile(r"\.\./[s]hared\b"),
    "a tracker item": re.compile(r"\b[i]ssues? ?#?\d+|\bthe [i]ssue's\b", re.IGNORECASE),
    "a planning document": re.compile(
        r"\bseed(?:'s| \d| doc| SDK)|\b(?:DESIGN|STYLE)\.md\b", re.IGNORECASE
    ),
    "an outside harness": re.compile(r"\breference [h]arness\b", re.IGNORECASE),
    "a development session": re.compile(
        r"\b(?:first|second|third|fourth|fifth) [s]ession\b|\bend of the [s]ession\b"
        r"|\bhardening [p]ass\b",
        re.IGNORECASE,
    ),
}

# reStructuredText that click would print as is: ``literals``, :roles:`x`, directives.
RST_MARKUP = re.compile(r"``|:[a-z]+(?::[a-z]+)?:`|^\s*\.\. [a-z-]+::", re.MULTILINE)


def repository_text_files() -> Iterator[tuple[str, str]]:
    """(path, text) of every tracked or new, not ignored, text file of the checkout."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no list of the repository's files")
    for name in sorted(set(listed.stdout.decode().split("\0")) - {""}):
        path = ROOT / name
        if name.startswith(SKIPPED_PREFIXES) or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            yield name, data.decode("utf-8")
        except UnicodeDecodeError:
            continue


def test_the_repository_names_nothing_outside_the_product() -> None:
    found = [
        f"{name}:{number}: {what}: {line.strip()}"
        for name, text in repository_text_files()
        for number, line in enumerate(text.splitlines(), start=1)
        for what, pattern in FORBIDDEN.items()
        if pattern.search(line)
    ]
    if found:
        pytest.fail("text about something other than the product:\n" + "\n".join(found))


def commands(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The argument path of the command line itself and of every subcommand under it."""
    yield path
    if isinstance(command, click.Group):
        context = click.Context(command, info_name=path[-1] if path else "durable-rpc")
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            assert sub is not None, name
            yield from commands(sub, (*path, name))


def test_cli_help_is_plain_text() -> None:
    runner = CliRunner()
    paths = list(commands(cli))
    assert len(paths) > 20  # the walk reached the subcommands
    found = []
    for path in paths:
        shown = runner.invoke(cli, [*path, "--help"], prog_name="durable-rpc")
        assert shown.exit_code == 0, (path, shown.output)
        found += [
            f"durable-rpc {' '.join(path)} --help: {line.strip()}"
            for line in shown.output.splitlines()
            if RST_MARKUP.search(line)
        ]
    if found:
        pytest.fail("markup click prints verbatim:\n" + "\n".join(found))
