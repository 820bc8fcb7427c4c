"""A task queue's concurrency limit with two server replicas on one PostgreSQL database
and four worker processes, two polling each replica: the limit is cluster-wide (the
claims of both replicas serialize on the limit row), as the activities themselves
record it (the SQLite twin: tests/e2e/test_queue_limits.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.v1 import admin_service_pb2 as pb
from tests.e2e import apps
from tests.e2e.conftest import WorkerProcess
from tests.e2e.test_queue_limits import LIMIT, QUEUE, max_running
from tests.scale.procs import PgServerProcess

pytestmark = pytest.mark.timeout(180)


async def test_concurrency_limit_holds_across_two_replicas(
    replicas: Callable[[int], list[PgServerProcess]],
    spawn_worker: Callable[..., WorkerProcess],
    test_log: Path,
) -> None:
    first, second = replicas(2)
    client = await Client.connect(first.address)
    try:
        await client.call(
            client.admin_service.SetTaskQueueLimit,
            pb.SetTaskQueueLimitRequest(task_queue=QUEUE, max_concurrent_activities=LIMIT),
        )
        workers = [spawn_worker(r.address, QUEUE) for r in (first, second, first, second)]
        handles = [
            await client.start_workflow(apps.Naps.run, 8, 0.3, 10.0, id=f"pg-{i}", task_queue=QUEUE)
            for i in range(2)
        ]
        for handle in handles:
            assert len(await handle.result(timeout=120)) == 8
        for worker in workers:
            worker.stop()
    finally:
        await client.close()
    peak, ran = max_running(test_log)
    assert ran == 16
    assert peak == LIMIT
