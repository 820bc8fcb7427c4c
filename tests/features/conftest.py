"""Feature tests run like tests/e2e: a server process on a SQLite file, worker processes
running tests/features/apps.py, real sockets. The e2e fixtures are re-exported here."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, ServerProcess, WorkerProcess, client, server

__all__ = ["client", "server"]


class FeatureWorker(WorkerProcess):
    """A worker process running ``tests.features.apps``."""

    def __init__(self, address: str, task_queue: str, log_dir: Path, *args: str) -> None:
        self.log_path = log_dir / f"worker-{task_queue}-{time.monotonic_ns()}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.features.apps", address, task_queue, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )


@pytest.fixture
def spawn_worker(tmp_path: Path) -> Iterator[Callable[..., FeatureWorker]]:
    started: list[FeatureWorker] = []

    def spawn(address: str, task_queue: str, *args: str) -> FeatureWorker:
        worker = FeatureWorker(address, task_queue, tmp_path, *args)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.stop()


@pytest.fixture
def test_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Activities of worker processes append one line per execution here."""
    path = tmp_path / "executions.log"
    path.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(path))
    return path


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def worker(
    server: ServerProcess, queue: str, test_log: Path, spawn_worker: Callable[..., FeatureWorker]
) -> FeatureWorker:
    """One released worker on ``queue``."""
    return spawn_worker(server.address, queue, "--release")


def lines(path: Path, prefix: str) -> list[str]:
    """The log lines starting with ``prefix``, without the pid suffix."""
    return [
        line.rsplit(" pid=", 1)[0]
        for line in path.read_text().splitlines()
        if line.startswith(prefix)
    ]
