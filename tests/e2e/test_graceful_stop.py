"""SIGTERM always stops ``durable-rpc server`` gracefully, within its grace period: at
start-up (right after "listening on"), under load and idle, on SQLite and PostgreSQL; the
store is closed and the process exits 0. A second SIGTERM during a stop cuts the grace
short and still closes the store."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import re
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from google.protobuf import duration_pb2
from grpc_health.v1.health import aio as health_aio

from durable_rpc import Client
from durable_rpc.server import ServerConfig
from durable_rpc.server._health import StoreHealth
from durable_rpc.store._sqlite import SQLiteStore
from durable_rpc.v1 import service_pb2
from tests.e2e.conftest import ROOT, eventually, free_port
from tests.scale import cluster as pg

pytestmark = pytest.mark.timeout(300)

GRACE_S = ServerConfig.shutdown_grace_s
LISTENING = "durable-rpc listening on"
STORE_CLOSED = re.compile(r" INFO durable_rpc\.server: store .* closed$", re.MULTILINE)
STOPPING = "stopping: calls in flight"
STOPPED = "durable-rpc stopped"
#: A stop may use its whole grace period (a call in flight); the process then still has
#: to exit (the interpreter's own shutdown, on a busy machine).
EXIT_MARGIN_S = 5.0
#: Stops per store, by the moment SIGTERM comes (50 in all).
SCENARIOS = {"start-up": 20, "load": 15, "idle": 15}
#: Servers stopped at the same time (each a process of its own).
PARALLEL = 6
#: Clients starting runs against a server under load, and the runs started before SIGTERM.
LOAD_CLIENTS = 3
LOAD_STARTS = 6


@dataclass
class Served:
    """One ``durable-rpc server`` child whose merged stdout/stderr is read line by line."""

    proc: asyncio.subprocess.Process
    address: str
    lines: list[str] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None
    _listening: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    async def start(cls, db_url: str) -> Served:
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "durable_rpc.cli",
            "server",
            "--db",
            db_url,
            "--listen",
            f"127.0.0.1:{port}",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=ROOT,
        )
        served = cls(proc, f"127.0.0.1:{port}")
        served._reader = asyncio.create_task(served._read())
        return served

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            if LISTENING in line:
                self._listening.set()

    async def listening(self) -> None:
        async with asyncio.timeout(60):
            await self._listening.wait()

    async def exit_code(self, timeout: float) -> int | None:
        """The exit code within ``timeout`` seconds, or None (the child is then killed)."""
        try:
            async with asyncio.timeout(timeout):
                code = await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            return None
        assert self._reader is not None
        await self._reader
        return code

    def log(self) -> str:
        return "\n".join(self.lines[-40:])


@dataclass(frozen=True)
class Stop:
    scenario: str
    code: int | None
    #: From SIGTERM to the process's exit, as the test saw it.
    seconds: float
    log: str

    def stop_seconds(self) -> float | None:
        """From "stopping" to "stopped", by the server's own log (None: not logged)."""
        stamps = [
            _stamp(line) for line in self.log.splitlines() if STOPPING in line or STOPPED in line
        ]
        return stamps[-1] - stamps[0] if len(stamps) == 2 else None

    def clean(self) -> bool:
        stop_seconds = self.stop_seconds()
        return (
            self.code == 0
            and stop_seconds is not None
            and stop_seconds <= GRACE_S
            and self.seconds < GRACE_S + EXIT_MARGIN_S
            and STORE_CLOSED.search(self.log) is not None
        )


def _stamp(line: str) -> float:
    """The seconds of a log line's timestamp ("2026-01-02 03:04:05,678 INFO ...")."""
    moment = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return moment.timestamp()


async def _start_runs(address: str, enough: asyncio.Event, started: itertools.count[int]) -> None:
    """Start runs (no worker takes them) until the server goes away."""
    with contextlib.suppress(Exception):
        async with await Client.connect(address) as client:
            while True:
                await client.start_workflow(
                    "Nothing", id=f"stop-{uuid.uuid4().hex}", task_queue="nobody"
                )
                if next(started) + 1 >= LOAD_STARTS:
                    enough.set()


async def _stop_once(db_url: str, scenario: str) -> Stop:
    served = await Served.start(db_url)
    await served.listening()
    load: list[asyncio.Task[None]] = []
    if scenario == "idle":
        async with await Client.connect(served.address):
            pass  # serving calls, nothing in flight
    elif scenario == "load":
        enough = asyncio.Event()
        started = itertools.count()
        load = [
            asyncio.create_task(_start_runs(served.address, enough, started))
            for _ in range(LOAD_CLIENTS)
        ]
        async with asyncio.timeout(60):
            await enough.wait()
    loop = asyncio.get_running_loop()
    sent = loop.time()
    served.proc.send_signal(signal.SIGTERM)
    # Past the grace period the stop has failed; a hung server is killed after a margin.
    code = await served.exit_code(GRACE_S + 20)
    seconds = loop.time() - sent
    for task in load:
        task.cancel()
    await asyncio.gather(*load, return_exceptions=True)
    return Stop(scenario, code, seconds, served.log())


@pytest.fixture(params=["sqlite", *(["postgres"] if pg.available() else [])])
async def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'durable.db'}"
        return
    url = pg.require_cluster().create_database()
    try:
        yield url
    finally:
        pg.require_cluster().drop_database(url)


async def test_sigterm_always_stops_the_server_within_its_grace_period(store_url: str) -> None:
    gate = asyncio.Semaphore(PARALLEL)

    async def stop(scenario: str) -> Stop:
        async with gate:
            return await _stop_once(store_url, scenario)

    stops = await asyncio.gather(
        *(stop(scenario) for scenario, count in SCENARIOS.items() for _ in range(count))
    )
    failed = [s for s in stops if not s.clean()]
    assert not failed, "\n\n".join(
        f"{s.scenario}: exit {s.code} after {s.seconds:.1f}s (stop {s.stop_seconds()}s)\n{s.log}"
        for s in failed[:3]
    )
    assert len(stops) == sum(SCENARIOS.values())


async def test_a_second_sigterm_cuts_the_grace_short_and_still_closes_the_store(
    tmp_path: Path,
) -> None:
    served = await Served.start(f"sqlite:///{tmp_path / 'durable.db'}")
    await served.listening()
    async with await Client.connect(served.address) as client:
        await client.start_workflow("Nothing", id="never-ends", task_queue="nobody")
        # A call that stays in flight: the result of a run no worker takes.
        waiting = asyncio.create_task(
            client.call(
                client.workflow_service.GetWorkflowResult,
                service_pb2.GetWorkflowResultRequest(
                    workflow_id="never-ends", wait_timeout=duration_pb2.Duration(seconds=60)
                ),
            )
        )
        # A later call on the same connection answered: the server has the first one.
        await client.call(
            client.workflow_service.DescribeWorkflow,
            service_pb2.DescribeWorkflowRequest(workflow_id="never-ends"),
        )
        served.proc.send_signal(signal.SIGTERM)
        await eventually(
            lambda: any(STOPPING in line for line in served.lines),
            what="the stop to begin",
        )
        assert served.proc.returncode is None  # waiting for the call in flight
        loop = asyncio.get_running_loop()
        sent = loop.time()
        served.proc.send_signal(signal.SIGTERM)
        code = await served.exit_code(GRACE_S + 20)
        seconds = loop.time() - sent
        with contextlib.suppress(Exception):
            await waiting
    log = served.log()
    assert code == 0, log
    assert seconds < GRACE_S / 2, (seconds, log)
    assert "aborting the calls still in flight" in log
    assert STORE_CLOSED.search(log) and STOPPED in log


class _StoppedAsItAnswers(SQLiteStore):
    """A SQLite store whose health check, as it answers, has the health monitor stopped:
    the cancellation reaches the monitor in the same turn of the event loop as the answer,
    the moment where ``asyncio.wait_for`` (Python 3.11) drops a cancellation. A SIGTERM
    landing with a probe's answer does this in a real server (most often on PostgreSQL,
    whose probe is a round trip from a thread)."""

    monitor: StoreHealth | None = None
    stopping: asyncio.Task[None] | None = None

    async def check_health(self) -> None:
        await super().check_health()
        if self.monitor is not None and self.stopping is None:
            self.stopping = asyncio.get_running_loop().create_task(self.monitor.stop())


async def test_the_health_monitor_stops_when_cancelled_as_a_probe_answers(
    tmp_path: Path,
) -> None:
    store = _StoppedAsItAnswers(str(tmp_path / "durable.db"))
    await store.open()
    try:
        names = [""]
        monitor = StoreHealth(
            store, health_aio.HealthServicer(), names, interval_s=0.05, timeout_s=5, store_name="t"
        )
        store.monitor = monitor
        monitor.start()
        await eventually(lambda: store.stopping is not None, what="a probe to answer")
        assert store.stopping is not None
        # Waited for without cancelling it: a second cancellation would end the monitor.
        await asyncio.wait({store.stopping}, timeout=GRACE_S)
        assert store.stopping.done(), "the health monitor kept probing after its stop"
        await store.stopping
    finally:
        await store.close()
