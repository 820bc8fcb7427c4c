"""A task queue's concurrency limit through a real server process (SQLite), set with the
CLI, with four worker processes: never more attempts running at once than the limit, as
the activities themselves record it (tests/e2e/apps.py's ``nap`` writes a start and an
end line per execution to one shared log, in real-time order). The PostgreSQL twin with
two replicas: tests/scale/test_queue_limits_replicas.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.v1 import admin_service_pb2 as pb
from tests.cli_process import run_cli_async
from tests.e2e import apps
from tests.e2e.conftest import ServerProcess, WorkerProcess

pytestmark = pytest.mark.timeout(180)

QUEUE = "limited"
LIMIT = 3


def max_running(log: Path) -> tuple[int, int]:
    """(the most naps running at once, how many ran) from the shared execution log."""
    running = peak = ran = 0
    for line in log.read_text().splitlines():
        if line.startswith("nap-start:"):
            running += 1
            ran += 1
            peak = max(peak, running)
        elif line.startswith("nap-end:"):
            running -= 1
    return peak, ran


async def run_naps_on_four_workers(
    client: Client, address: str, spawn_worker: Callable[..., WorkerProcess], tag: str
) -> None:
    """Two runs of eight 0.3 s naps each (16 attempts wanting to run at once), on four
    workers of eight slots each: only the limit holds them back."""
    workers = [spawn_worker(address, QUEUE) for _ in range(4)]
    handles = [
        await client.start_workflow(apps.Naps.run, 8, 0.3, 10.0, id=f"{tag}-{i}", task_queue=QUEUE)
        for i in range(2)
    ]
    for handle in handles:
        assert len(await handle.result(timeout=120)) == 8
    for worker in workers:
        worker.stop()


async def test_concurrency_limit_holds_across_four_workers(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = tmp_path / "executions.log"
    log.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(log))
    set_limit = await run_cli_async(
        "task-queue", "limit", "set", QUEUE, str(LIMIT), "--json", address=server.address
    )
    assert json.loads(set_limit.stdout)["limit"]["maxConcurrentActivities"] == LIMIT
    listed = await run_cli_async("task-queue", "limit", "list", address=server.address)
    assert QUEUE in listed.stdout

    await run_naps_on_four_workers(client, server.address, spawn_worker, "sqlite")
    peak, ran = max_running(log)
    assert ran == 16
    assert peak == LIMIT  # the limit, and reached (the workers had room for more)

    described: pb.DescribeTaskQueueResponse = await client.call(
        client.admin_service.DescribeTaskQueue,
        pb.DescribeTaskQueueRequest(namespace="default", task_queue=QUEUE),
    )
    assert (described.limit.max_concurrent_activities, described.activities_in_use) == (LIMIT, 0)
    removed = await run_cli_async("task-queue", "limit", "remove", QUEUE, address=server.address)
    assert "no limit" in removed.stdout
    reply: pb.ListTaskQueueLimitsResponse = await client.call(
        client.admin_service.ListTaskQueueLimits, pb.ListTaskQueueLimitsRequest()
    )
    assert list(reply.limits) == []


async def test_bad_limit_is_invalid_argument(client: Client) -> None:
    with pytest.raises(InvalidArgumentError, match="max_concurrent_activities"):
        await client.call(
            client.admin_service.SetTaskQueueLimit,
            pb.SetTaskQueueLimitRequest(task_queue=QUEUE, max_concurrent_activities=-2),
        )
