"""The durable-rpc CLI as a child process, for tests that drive it as a user would.

Async tests must use ``run_cli_async``: a blocking ``subprocess.run`` inside a running
event loop stalls every task of the test (the client's calls among them) for as long as
the child runs, so under load a test could outlive its timeout while the loop was frozen
in a wait for a child. Both forms bound the child's life: on timeout it is killed and
reaped before the test fails, so no zombie is left behind.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Mapping

from tests.e2e.conftest import ROOT

CLI = (sys.executable, "-m", "durable_rpc.cli")


def _env(address: str | None, env: Mapping[str, str] | None) -> dict[str, str]:
    merged = {**os.environ, **(env or {})}
    if address is not None:
        merged["DURABLE_RPC_ADDRESS"] = address
    return merged


def run_cli(
    *args: str,
    address: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``durable-rpc ARGS`` from a synchronous test."""
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(address, env),
        timeout=timeout,
    )


async def run_cli_async(
    *args: str,
    address: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``durable-rpc ARGS`` without blocking the test's event loop."""
    proc = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env=_env(address, env),
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return subprocess.CompletedProcess(
        [*CLI, *args], proc.returncode, stdout.decode(), stderr.decode()
    )


def checked(done: subprocess.CompletedProcess[str]) -> str:
    """``done``'s stdout; a failed command fails the test with what it printed."""
    assert done.returncode == 0, (done.args, done.returncode, done.stdout, done.stderr)
    return done.stdout
