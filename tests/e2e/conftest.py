"""Real processes over real sockets: a server process on a SQLite file (or a PostgreSQL
database), worker processes.

`ServerProcess` runs `durable-rpc server` exactly as a user would; tests SIGKILL and
restart it on the same database and port. A test (or module) marked ``also_on_postgres``
runs twice, its server on SQLite (id ``sqlite``) and on a fresh PostgreSQL database of the
test cluster (id ``postgres``): see tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from durable_rpc import Client

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Poll a cheap condition (a file, a process state) until it holds or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


async def eventually(
    condition: Callable[[], object], timeout: float = 30.0, what: str = "condition"
) -> None:
    """Await an async or sync condition until it is truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


class ServerProcess:
    def __init__(
        self,
        db_path: Path,
        log_path: Path,
        *extra: str,
        listen_host: str = "127.0.0.1",
        db_url: str | None = None,
    ) -> None:
        #: The SQLite file (unused when ``db_url`` names another database).
        self.db_path = db_path
        self.db_url = db_url or f"sqlite:///{db_path}"
        self.log_path = log_path
        self.port = free_port()
        # Clients (and the health check) always come over loopback.
        self.address = f"127.0.0.1:{self.port}"
        self.listen = f"{listen_host}:{self.port}"
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durable_rpc.cli",
                "server",
                "--db",
                self.db_url,
                "--listen",
                self.listen,
                "--workflow-task-lease",
                "2",
                "--poll-timeout",
                "5",
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        log.close()
        self.wait_healthy()

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.log_path.read_text()[-3000:]}")
            try:
                with self.health_channel() as channel:
                    stub = health_pb2_grpc.HealthStub(channel)
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("server did not become healthy")
            time.sleep(0.05)

    def health_channel(self) -> grpc.Channel:
        """The channel the start-up health check uses (TLS servers override it)."""
        return grpc.insecure_channel(self.address)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def terminate(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def server(tmp_path: Path, server_db_url: str) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path / "durable.db", tmp_path / "server.log", db_url=server_db_url)
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[Client]:
    c = await Client.connect(server.address)
    yield c
    await c.close()


class WorkerProcess:
    """tests/e2e/apps.py (or another worker ``module`` of tests/e2e) run as a separate
    worker process (so it can be SIGKILLed)."""

    def __init__(
        self,
        address: str,
        task_queue: str,
        log_dir: Path,
        *args: str,
        module: str = "tests.e2e.apps",
    ) -> None:
        self.log_path = log_dir / f"worker-{task_queue}-{time.monotonic_ns()}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, address, task_queue, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def spawn_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def spawn(address: str, task_queue: str, *args: str) -> WorkerProcess:
        worker = WorkerProcess(address, task_queue, tmp_path, *args)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.stop()
