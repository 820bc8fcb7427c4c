"""The web UI under test: a real ``durable-rpc ui`` process in front of a real server
process with a real worker process (tests/ui/ui_app.py), and an HTTP client with cookies
for the page tests (the browser tests drive headless Chromium: tests/ui/browser.py)."""

from __future__ import annotations

import contextlib
import http.cookiejar
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, ServerProcess, WorkerProcess, free_port, wait_for

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class UiProcess:
    """``durable-rpc ui --address SERVER --listen 127.0.0.1:PORT`` as a user runs it."""

    def __init__(self, server_address: str, log_path: Path, *extra: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "durable_rpc.cli",
                    "ui",
                    "--address",
                    server_address,
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    *extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env={**os.environ, **env},
            )
        try:
            wait_for(self._healthy, what=f"the UI at {self.url} ({log_path})")
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"ui exited: {self.log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as reply:
                return bool(reply.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass
class Reply:
    status: int
    url: str
    text: str

    def csrf(self) -> str:
        match = CSRF.search(self.text)
        assert match is not None, self.text[:2000]
        return match.group(1)


class Browserless:
    """An HTTP client with a cookie jar that does not follow redirects silently away
    from the UI (it follows them, and records where it ended)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path: str) -> Reply:
        return self._send(urllib.request.Request(self.base + path))

    def post(
        self, path: str, fields: dict[str, str], headers: dict[str, str] | None = None
    ) -> Reply:
        body = urllib.parse.urlencode(fields).encode()
        request = urllib.request.Request(
            self.base + path, data=body, method="POST", headers=headers or {}
        )
        return self._send(request)

    def cookie(self, name: str) -> str | None:
        return next((str(c.value) for c in self.jar if c.name == name), None)

    def _send(self, request: urllib.request.Request) -> Reply:
        try:
            with self.opener.open(request, timeout=30) as reply:
                return Reply(reply.status, reply.url, reply.read().decode())
        except urllib.error.HTTPError as exc:
            return Reply(exc.code, exc.url, exc.read().decode())


@dataclass
class Stack:
    """A server, a worker on ``task_queue`` and a UI in front of the server."""

    server: ServerProcess
    worker: WorkerProcess
    ui: UiProcess
    task_queue: str


def start_worker(address: str, task_queue: str, log_dir: Path, *args: str) -> WorkerProcess:
    return WorkerProcess(address, task_queue, log_dir, *args, module="tests.ui.ui_app")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """No authentication: the UI needs no sign-in."""
    tmp = tmp_path_factory.mktemp("ui")
    with contextlib.ExitStack() as started:  # what started is stopped, even mid-setup
        server = ServerProcess(tmp / "durable.db", tmp / "server.log")
        started.callback(server.stop)
        server.start()
        worker = start_worker(server.address, "ui-q", tmp)
        started.callback(worker.stop)
        ui = UiProcess(server.address, tmp / "ui.log")
        started.callback(ui.stop)
        yield Stack(server, worker, ui, "ui-q")


@dataclass
class AuthStack(Stack):
    """A server with ``--auth``, its worker on a worker key, keys of each role for
    namespace ``default`` (and the cluster admin's)."""

    root_key: str
    admin_key: str
    client_key: str


@pytest.fixture(scope="module")
def auth_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthStack]:
    import asyncio

    from durable_rpc import Client
    from tests.security.conftest import AuthServer, bootstrap_admin_key, make_key

    tmp = tmp_path_factory.mktemp("ui-auth")
    db = tmp / "durable.db"
    root = bootstrap_admin_key(f"sqlite:///{db}")
    with contextlib.ExitStack() as started:
        server = AuthServer(db, tmp / "server.log")
        started.callback(server.stop)
        server.start()

        async def keys() -> tuple[str, str, str]:
            async with await Client.connect(server.address, api_key=root) as c:
                return (
                    await make_key(c, "admin", "default", "ui-admin"),
                    await make_key(c, "client", "default", "ui-client"),
                    await make_key(c, "worker", "default", "ui-worker"),
                )

        admin, client, worker_key = asyncio.run(keys())
        # The worker process reads its key from its environment (never its arguments).
        os.environ["UI_TEST_WORKER_KEY"] = worker_key
        started.callback(os.environ.pop, "UI_TEST_WORKER_KEY", None)
        worker = start_worker(server.address, "ui-q", tmp, "--api-key-env", "UI_TEST_WORKER_KEY")
        started.callback(worker.stop)
        ui = UiProcess(server.address, tmp / "ui.log")
        started.callback(ui.stop)
        yield AuthStack(server, worker, ui, "ui-q", root, admin, client)


def signed_in(stack: AuthStack, key: str) -> Browserless:
    """A client signed in with ``key`` through the sign-in form, as a browser does."""
    http = Browserless(stack.ui.url)
    page = http.get("/")
    assert page.url.endswith("/signin?next=/"), page.url
    reply = http.post("/signin", {"api_key": key, "next": "/", "csrf": page.csrf()})
    assert reply.status == 200 and reply.url.endswith("/n/default/runs"), (reply.url, reply.text)
    return http
