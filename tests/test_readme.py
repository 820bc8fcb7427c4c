"""Every ```python block of README.md runs as pasted and prints what the README promises.

Each block is written to its own file and run as a script in a fresh interpreter, the way a
reader would paste it. Blocks that talk to a server get a real ``durable-rpc server``
process through ``DURABLE_RPC_ADDRESS`` (which ``Client.connect()`` reads when given no
address); the others (the time-skipping environment) run with no server at all.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, ServerProcess

README = ROOT / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What each block prints, in the order the blocks appear. A new block must be added here:
# the count is checked, so a block nobody runs cannot slip in.
EXPECTED_OUTPUT = [
    "Hello, World!",  # Quickstart: a worker and a client against the server
    "Hello, World! (after a week of workflow time)",  # Testing: time-skipping environment
]
BLOCK_TIMEOUT_S = 120


def python_blocks() -> list[str]:
    return BLOCK.findall(README.read_text())


def needs_server(block: str) -> bool:
    return "Client.connect(" in block


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("readme-server")
    proc = ServerProcess(tmp / "durable.db", tmp / "server.log")
    proc.start()
    yield proc
    proc.stop()


def test_every_python_block_is_listed() -> None:
    assert len(python_blocks()) == len(EXPECTED_OUTPUT), (
        "README.md's python blocks and EXPECTED_OUTPUT disagree; list what each block prints"
    )


@pytest.mark.parametrize("index", range(len(EXPECTED_OUTPUT)))
def test_readme_block_runs_as_pasted(
    index: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    blocks = python_blocks()
    assert index < len(blocks), f"README.md has no python block #{index + 1}"
    block = blocks[index]
    script = tmp_path / f"readme_block_{index + 1}.py"
    script.write_text(block)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DURABLE_RPC_")}
    if needs_server(block):
        env["DURABLE_RPC_ADDRESS"] = request.getfixturevalue("server").address
    # Run from an empty directory: the block must not depend on files of the checkout.
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=BLOCK_TIMEOUT_S,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, f"block #{index + 1} failed:\n{done.stdout}\n{done.stderr}"
    assert EXPECTED_OUTPUT[index] in done.stdout.splitlines(), (
        f"block #{index + 1} printed {done.stdout!r}, expected a line {EXPECTED_OUTPUT[index]!r}"
    )


def test_the_quickstart_ends_by_opening_the_web_ui() -> None:
    """The quickstart's last words: the web UI's address, where `durable-rpc ui` listens
    by default."""
    from durable_rpc.cli._ui import DEFAULT_LISTEN

    text = README.read_text()
    quickstart = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert quickstart.strip().endswith(f"open http://{DEFAULT_LISTEN}")
    assert "durable-rpc ui" in quickstart
