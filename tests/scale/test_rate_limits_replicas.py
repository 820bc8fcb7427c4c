"""A rate limit with two server replicas on one PostgreSQL database and two worker
processes, one polling each replica: the rate is cluster-wide (the claims of both
replicas take their tokens under the bucket row's lock), within 10% over 30 s, as the
activities themselves record it (the SQLite twin: tests/e2e/test_rate_limits.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.v1 import admin_service_pb2 as pb
from tests.e2e.test_rate_limits import (
    KEY,
    PER_RUN,
    RATE,
    RUNS,
    RateWorker,
    assert_rate_held,
    both_workers_registered,
    start_backlog,
    starts,
)
from tests.scale.procs import PgServerProcess

pytestmark = pytest.mark.timeout(240)


async def test_a_rate_limit_holds_across_two_replicas(
    replicas: Callable[[int], list[PgServerProcess]], tmp_path: Path
) -> None:
    log = tmp_path / "executions.log"
    log.touch()
    first, second = replicas(2)
    client = await Client.connect(first.address)
    workers = [
        RateWorker(r.address, log, tmp_path / f"worker-{i}.log")
        for i, r in enumerate((first, second))
    ]
    try:
        await client.call(
            client.admin_service.SetRateLimit,
            pb.SetRateLimitRequest(
                scope=pb.RATE_LIMIT_SCOPE_KEY, name=KEY, permits=RATE, period={"seconds": 1}
            ),
        )
        await both_workers_registered(client)
        handles = await start_backlog(client, "pg")
        await assert_rate_held(log)
        await client.call(
            client.admin_service.RemoveRateLimit,
            pb.RemoveRateLimitRequest(scope=pb.RATE_LIMIT_SCOPE_KEY, name=KEY),
        )
        for handle in handles:
            assert await handle.result(timeout=120) == PER_RUN
    finally:
        for worker in workers:
            worker.stop()
        await client.close()
    tags = [tag for _, tag, _ in starts(log)]
    assert len(tags) == len(set(tags)) == RUNS * PER_RUN
