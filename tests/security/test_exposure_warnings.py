"""A server or web UI left open says so loudly: one WARNING line at start naming what is
open (``durable-rpc server`` without --auth, with --insecure beyond loopback;
``durable-rpc ui`` beyond loopback), and none for an authenticated loopback server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, ServerProcess, free_port, wait_for
from tests.security.conftest import AuthServer, bootstrap_admin_key

pytestmark = pytest.mark.timeout(90)

LISTENING = "durable-rpc listening on"


def _started_log(server: ServerProcess) -> list[str]:
    """The server's log lines once its start has been logged whole (the warnings follow
    the "listening on" line in the same step of the start)."""
    server.start()
    wait_for(lambda: LISTENING in server.log_path.read_text(), what="the listening line")
    return server.log_path.read_text().splitlines()


def _warnings(lines: list[str]) -> list[str]:
    return [line for line in lines if re.search(r"\bWARNING\b", line)]


def test_a_server_without_auth_warns_that_any_local_process_is_let_in(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "durable.db", tmp_path / "server.log")
    try:
        warnings = _warnings(_started_log(server))
    finally:
        server.stop()
    assert len(warnings) == 1, warnings
    assert "authentication is off" in warnings[0]
    assert server.listen in warnings[0]
    assert "admin keys" in warnings[0] and "use --auth" in warnings[0]


def test_an_insecure_server_beyond_loopback_warns_of_the_network(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "durable.db", tmp_path / "server.log", "--insecure", listen_host="0.0.0.0"
    )
    try:
        warnings = _warnings(_started_log(server))
    finally:
        server.stop()
    assert len(warnings) == 2, warnings
    no_auth, plain_text = warnings
    assert f"authentication is off on 0.0.0.0:{server.port}, beyond loopback" in no_auth
    assert "ANYONE who can reach this port" in no_auth
    assert "serving plain text (--insecure)" in plain_text and "unencrypted" in plain_text


def test_an_insecure_server_with_auth_beyond_loopback_warns_of_plain_text_only(
    tmp_path: Path,
) -> None:
    db = tmp_path / "durable.db"
    bootstrap_admin_key(f"sqlite:///{db}")
    server = AuthServer(db, tmp_path / "server.log", "--insecure")
    server.listen = f"0.0.0.0:{server.port}"
    try:
        warnings = _warnings(_started_log(server))
    finally:
        server.stop()
    assert len(warnings) == 1, warnings
    assert "serving plain text (--insecure)" in warnings[0]


def test_an_authenticated_loopback_server_logs_no_warning(tmp_path: Path) -> None:
    db = tmp_path / "durable.db"
    bootstrap_admin_key(f"sqlite:///{db}")
    server = AuthServer(db, tmp_path / "server.log")
    try:
        lines = _started_log(server)
    finally:
        server.stop()
    assert any("API keys required" in line for line in lines), lines
    assert _warnings(lines) == []


def _ui_log(tmp_path: Path, host: str, *extra: str) -> list[str]:
    """``durable-rpc ui --listen HOST:PORT``'s log once it serves, then stopped."""
    log_path = tmp_path / f"ui-{host}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durable_rpc.cli",
                "ui",
                "--address",
                f"127.0.0.1:{free_port()}",
                "--listen",
                f"{host}:{free_port()}",
                *extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "UI_DEFAULT_KEY": "drpc_0123456789abcdef_secret"},
        )
    try:
        wait_for(
            lambda: proc.poll() is not None or "Uvicorn running" in log_path.read_text(),
            what="the UI to serve",
        )
        assert proc.poll() is None, log_path.read_text()
    finally:
        proc.terminate()
        proc.wait(20)
    return log_path.read_text().splitlines()


def test_a_ui_beyond_loopback_warns_and_names_its_shared_key(tmp_path: Path) -> None:
    warnings = _warnings(_ui_log(tmp_path, "0.0.0.0", "--api-key-env", "UI_DEFAULT_KEY"))
    assert len(warnings) == 1, warnings
    assert "the web UI listens on 0.0.0.0:" in warnings[0] and "beyond loopback" in warnings[0]
    assert "every visitor acts with the key in UI_DEFAULT_KEY" in warnings[0]
    assert "drpc_0123456789abcdef_secret" not in "\n".join(warnings)


def test_a_ui_on_loopback_logs_no_warning(tmp_path: Path) -> None:
    lines = _ui_log(tmp_path, "127.0.0.1")
    assert any("Uvicorn running" in line for line in lines), lines
    assert _warnings(lines) == []
