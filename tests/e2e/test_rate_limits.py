"""A rate limit through a real server process (SQLite), set with the CLI, with two worker
processes (tests/e2e/rate_app.py): over 30 s, the activities of one rate_limit_key start
at the limit's rate within 10%, as the activities themselves record it, from a backlog
far larger than the window allows; removing the limit lets the rest run, each activity
once (deferred, never failed)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durable_rpc import Client, WorkflowHandle
from durable_rpc.errors import InvalidRateLimitError
from durable_rpc.v1 import admin_service_pb2 as pb
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ROOT, ServerProcess, eventually
from tests.e2e.rate_app import KEY, Fanout

pytestmark = pytest.mark.timeout(240)

QUEUE = "rated"
RATE = 5  # per second
WINDOW_S = 30.0
RUNS, PER_RUN = 4, 100  # a backlog of 400: 2.6 times what the window allows


class RateWorker:
    """``tests.e2e.rate_app`` as a worker process."""

    def __init__(self, address: str, log: Path, out: Path) -> None:
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path, "DURABLE_RPC_TEST_LOG": str(log)}
        with out.open("wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.rate_app", address, QUEUE],
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "executions.log"
    path.touch()
    return path


@pytest.fixture
def workers(server: ServerProcess, log: Path, tmp_path: Path) -> Iterator[list[RateWorker]]:
    started = [RateWorker(server.address, log, tmp_path / f"worker-{i}.log") for i in range(2)]
    yield started
    for worker in started:
        worker.stop()


def starts(log: Path) -> list[tuple[float, str, str]]:
    """(wall-clock time, tag, pid) of every call_downstream start, in time order."""
    found = []
    for line in log.read_text().splitlines():
        if line.startswith("call-start:"):
            head, pid = line.rsplit(" pid=", 1)
            _, tag, at = head.split(":")
            found.append((float(at), tag, pid))
    return sorted(found)


async def start_backlog(client: Client, tag: str) -> list[WorkflowHandle[Any]]:
    """RUNS runs of PER_RUN keyed activities each, all scheduled at once."""
    return [
        await client.start_workflow(
            Fanout.run, f"{tag}{i}", PER_RUN, id=f"{tag}-{i}", task_queue=QUEUE
        )
        for i in range(RUNS)
    ]


async def both_workers_registered(client: Client) -> None:
    """Both worker processes are registered (their claim cycles start right after), so
    the window measures two workers sharing the limit, not one still starting up."""

    async def registered() -> bool:
        listed: pb.ListWorkersResponse = await client.call(
            client.admin_service.ListWorkers,
            pb.ListWorkersRequest(namespace="default", task_queue=QUEUE),
        )
        return sum(worker.live for worker in listed.workers) == 2

    await eventually(registered, timeout=60, what="both workers registered")


def worker_outputs(log: Path) -> str:
    """What the worker processes printed (beside ``log``), for a failure's message."""
    return "\n".join(path.read_text() for path in sorted(log.parent.glob("worker-*.log")))


async def assert_rate_held(log: Path) -> None:
    """Waits out the 30 s window from the first start, then checks the starts in it."""
    await eventually(lambda: starts(log), timeout=60, what="the first start")
    first = starts(log)[0][0]

    # Waiting for time is the test: the window's last start, then one past it (or every
    # start, which an unlimited claim would make at once).
    def window_over() -> bool:
        found = starts(log)
        return found[-1][0] > first + WINDOW_S or len(found) == RUNS * PER_RUN

    await eventually(window_over, timeout=WINDOW_S + 30, what="30 s of starts")
    window = [s for s in starts(log) if s[0] < first + WINDOW_S]
    expected = RATE * WINDOW_S  # 150, plus the first burst (at most RATE more)
    assert expected * 0.9 <= len(window) <= expected * 1.1, len(window)
    # Past the burst, the steady rate holds too, and both workers took their share.
    steady = [s for s in window if s[0] >= first + 5]
    rate = len(steady) / (WINDOW_S - 5)
    assert RATE * 0.9 <= rate <= RATE * 1.1, rate
    assert len({pid for _, _, pid in window}) == 2, worker_outputs(log)


async def test_a_rate_limit_holds_within_ten_percent_over_30s_across_two_workers(
    server: ServerProcess, client: Client, workers: list[RateWorker], log: Path
) -> None:
    set_limit = await run_cli_async(
        "task-queue", "rate-limit", "set", KEY, f"{RATE}/s", "--json", address=server.address
    )
    assert set_limit.returncode == 0, set_limit.stderr
    limit = json.loads(set_limit.stdout)["rateLimit"]
    assert (limit["name"], limit["permits"], limit["burst"]) == (KEY, str(RATE), str(RATE))

    await both_workers_registered(client)
    handles = await start_backlog(client, "fan")
    await assert_rate_held(log)

    described: pb.DescribeTaskQueueResponse = await client.call(
        client.admin_service.DescribeTaskQueue,
        pb.DescribeTaskQueueRequest(namespace="default", task_queue=QUEUE),
    )
    [shown] = described.rate_limits
    assert (shown.scope, shown.name, shown.permits) == (pb.RATE_LIMIT_SCOPE_KEY, KEY, RATE)
    cli_describe = await run_cli_async("task-queue", "describe", QUEUE, address=server.address)
    assert f"rate limit (key {KEY}): {RATE} per 1000 ms" in cli_describe.stdout

    removed = await run_cli_async("task-queue", "rate-limit", "remove", KEY, address=server.address)
    assert "no rate limit" in removed.stdout, removed.stderr
    for handle in handles:
        assert await handle.result(timeout=120) == PER_RUN
    tags = [tag for _, tag, _ in starts(log)]
    assert len(tags) == len(set(tags)) == RUNS * PER_RUN  # each once: deferred, not failed


@pytest.mark.parametrize(
    ("rate", "why"),
    [("0/s", "permits"), ("5/0s", "period"), ("60/mn", "not PERMITS"), ("sixty", "not PERMITS")],
)
async def test_bad_rates_are_refused_by_the_cli_with_a_stable_reason(
    server: ServerProcess, rate: str, why: str
) -> None:
    refused = await run_cli_async(
        "task-queue", "rate-limit", "set", KEY, rate, address=server.address
    )
    assert refused.returncode != 0
    assert "INVALID_RATE_LIMIT" in refused.stderr and why in refused.stderr, refused.stderr


async def test_bad_rate_limits_are_invalid_rate_limit_over_the_api(client: Client) -> None:
    for request in (
        pb.SetRateLimitRequest(scope=pb.RATE_LIMIT_SCOPE_KEY, name=KEY, permits=5),  # no period
        pb.SetRateLimitRequest(name=KEY, permits=5, period={"seconds": 1}),  # no scope
        pb.SetRateLimitRequest(
            scope=pb.RATE_LIMIT_SCOPE_KEY, name=KEY, permits=5, period={"seconds": 1}, burst=-1
        ),
    ):
        with pytest.raises(InvalidRateLimitError):
            await client.call(client.admin_service.SetRateLimit, request)
    listed: pb.ListRateLimitsResponse = await client.call(
        client.admin_service.ListRateLimits, pb.ListRateLimitsRequest()
    )
    assert list(listed.rate_limits) == []
