"""Errors a person can read: every expected failure of the CLI is one line
``Error: <what> (<how to fix>)`` and a non-zero exit, never a traceback, unless
``--debug`` or ``DURABLE_RPC_DEBUG=1`` asks for one. Run as a user would, in a subprocess."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from durable_rpc.cli._main import cli
from tests.cli_process import run_cli
from tests.e2e.conftest import ROOT, free_port

pytestmark = pytest.mark.timeout(120)

BAD_INPUT = ("workflow", "start", "Greeter", "--id", "x", "--task-queue", "q", "--input", "nope")


def assert_one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The single ``Error:`` line of a failed command (which must name each fragment)."""
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr
    line = errors[0]
    assert line.endswith(")"), line  # <what> (<how to fix>)
    for fragment in fragments:
        assert fragment in line, line
    return line


def assert_traceback(done: subprocess.CompletedProcess[str], exception: str) -> None:
    assert done.returncode != 0, done.stdout
    assert "Traceback (most recent call last)" in done.stderr, done.stderr
    assert exception in done.stderr, done.stderr


def run_without(modules: tuple[str, ...], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in an interpreter where ``modules`` cannot be imported, as on an install
    without the optional package (None in sys.modules makes their import fail)."""
    script = (
        "import sys\n"
        f"for name in {modules!r}:\n"
        "    sys.modules[name] = None\n"
        "sys.argv[0] = 'durable-rpc'\n"
        "from durable_rpc.cli import main\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_input_that_is_not_json_is_one_line_and_debug_shows_the_traceback() -> None:
    assert_one_line_error(run_cli(*BAD_INPUT), "not valid JSON", "--input '[")
    assert_traceback(run_cli("--debug", *BAD_INPUT), "JSONDecodeError")
    assert_traceback(run_cli(*BAD_INPUT, env={"DURABLE_RPC_DEBUG": "1"}), "JSONDecodeError")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process's socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_port_in_use_is_one_line(taken_port: int) -> None:
    args = ("server", "--db", "sqlite://:memory:", "--listen", f"127.0.0.1:{taken_port}")
    assert_one_line_error(
        run_cli(*args), f"cannot listen on 127.0.0.1:{taken_port}", "another --listen"
    )
    assert_traceback(run_cli("--debug", *args), "ListenError")


def test_a_postgresql_url_without_psycopg_says_which_extra_to_install() -> None:
    args = ("server", "--db", "postgresql://nobody@127.0.0.1:1/none", "--listen", "127.0.0.1:0")
    assert_one_line_error(run_without(("psycopg",), *args), "pip install 'durable-rpc[postgres]'")
    assert_traceback(run_without(("psycopg",), "--debug", *args), "psycopg")


def test_the_otlp_exporter_missing_says_which_package_to_install() -> None:
    args = ("server", "--db", "sqlite://:memory:", "--listen", "127.0.0.1:0")
    args += ("--trace-exporter", "otlp")
    missing = ("opentelemetry.exporter",)
    assert_one_line_error(
        run_without(missing, *args), "pip install opentelemetry-exporter-otlp-proto-grpc"
    )
    assert_traceback(run_without(missing, "--debug", *args), "ModuleNotFoundError")


def test_replay_of_a_module_not_on_the_path_is_one_line(tmp_path: Path) -> None:
    exported = tmp_path / "run.json"
    exported.write_text('{"events": []}')
    args = ("replay", str(exported), "-m", "no_such_workflows")
    assert_one_line_error(run_cli(*args), "'no_such_workflows'", "PYTHONPATH")
    assert_traceback(run_cli("--debug", *args), "ModuleNotFoundError")


def test_no_server_answering_names_the_address_it_tried() -> None:
    address = f"127.0.0.1:{free_port()}"
    done = run_cli("workflow", "describe", "x", address=address)
    assert_one_line_error(done, f"no durable-rpc server answered at {address}", "--address")


def _options(command: click.Command, path: str) -> Iterator[tuple[str, click.Option]]:
    for param in command.params:
        if isinstance(param, click.Option):
            yield path, param
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _options(sub, f"{path} {name}")


def test_every_option_of_every_command_has_a_help_text() -> None:
    options = list(_options(cli, "durable-rpc"))
    assert len(options) > 50  # the walk reached the subcommands
    missing = [f"{path} {option.opts[0]}" for path, option in options if not option.help]
    # --help and --version are click's own, with their own help texts.
    assert missing == []
