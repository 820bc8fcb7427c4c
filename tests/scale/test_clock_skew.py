"""A replica and a worker whose process clock is off by minutes: leases and timers still
follow the database clock. No early takeover, no early or late timer.

The replica and the worker run in this process, and every wall-clock read of durable-rpc
(the server's due loop, the worker's lease keeper: ``time.time`` in those modules) is
shifted by ±10 minutes. (Shifting ``time.time`` process-wide would also skew gRPC's
Python-side deadlines against its C core's real clock, which no real process sees.)
The skewed replica is the only one: an honest replica would fire timers on time and hide
a late one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest

from durable_rpc import CancellationToken, Client, Worker, WorkflowSupervisor
from durable_rpc import WorkflowSupervisorConfig as Config
from durable_rpc.server import Server, ServerConfig, _due
from durable_rpc.worker import _lease_keeper
from tests.e2e import apps
from tests.e2e.conftest import free_port
from tests.scale.conftest import OpenPg
from tests.scale.procs import full_history

pytestmark = pytest.mark.timeout(120)

TIMER_S = 1.0
#: A timer may fire this late (due-loop wake-up, a workflow task); a replica trusting its
#: own clock would be up to the due loop's 5 s safety-net sleep late (or fire at once).
TIMER_SLACK_MS = 1_500
LEASE_MS = 2_000


class SkewedTime:
    """The ``time`` module, with ``time()`` off by ``skew_s`` seconds."""

    def __init__(self, skew_s: float) -> None:
        self.skew_s = skew_s

    def time(self) -> float:
        return time.time() + self.skew_s

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


@pytest.fixture(params=[-600, 600], ids=["clock-10min-behind", "clock-10min-ahead"])
def skewed_clock(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    skew_s: int = request.param
    for module in (_due, _lease_keeper):
        monkeypatch.setattr(module, "time", SkewedTime(skew_s))
    return skew_s


@pytest.fixture
async def skewed_replica(pg_url: str, skewed_clock: int) -> AsyncIterator[Server]:
    server = Server(
        ServerConfig(
            db_url=pg_url,
            listen=f"127.0.0.1:{free_port()}",
            workflow_task_lease_ms=LEASE_MS,
            poll_timeout_s=5,
        )
    )
    await server.start()
    yield server
    await server.stop()


async def run_worker(address: str, queue: str) -> Callable[[], asyncio.Future[object]]:
    """An in-process worker (same skewed clock); returns its stop function."""
    client = await Client.connect(address)
    worker = Worker(
        client,
        task_queue=queue,
        workflows=[apps.Sleeper, apps.TwoSteps],
        activities=[apps.step, apps.slow_step],
    )
    token = CancellationToken()
    config = Config(8).with_backoff(timedelta(milliseconds=20), timedelta(milliseconds=200))
    task = asyncio.ensure_future(WorkflowSupervisor(worker, config).run(token))

    def stop() -> asyncio.Future[object]:
        token.cancel()

        async def finish() -> object:
            report = await task
            await client.close()
            return report

        return asyncio.ensure_future(finish())

    return stop


async def test_timers_fire_by_database_time(skewed_replica: Server, open_pg: OpenPg) -> None:
    address = skewed_replica.config.listen
    stop = await run_worker(address, "skew-timers")
    client = await Client.connect(address)
    try:
        handles = [
            await client.start_workflow(
                apps.Sleeper.run, TIMER_S, id=f"sleep-{i}", task_queue="skew-timers"
            )
            for i in range(8)
        ]
        assert await asyncio.gather(*(h.result(timeout=30) for h in handles)) == ["woke"] * 8
    finally:
        await client.close()
        await stop()
    store = await open_pg()
    for i in range(8):
        events = await full_history(store, f"sleep-{i}")
        times = {e.WhichOneof("attributes"): e.event_time.ToMilliseconds() for e in events}
        late_ms = times["timer_fired"] - times["timer_started"] - int(TIMER_S * 1000)
        assert 0 <= late_ms <= TIMER_SLACK_MS, f"sleep-{i} fired {late_ms} ms after its due time"


async def test_no_takeover_before_the_lease_expires(
    skewed_replica: Server, open_pg: OpenPg
) -> None:
    """A workflow task held by a silent worker is taken over through the skewed replica
    only once its lease expired by the database clock."""
    store = await open_pg()
    address = skewed_replica.config.listen
    client = await Client.connect(address)
    try:
        handle = await client.start_workflow(
            apps.Sleeper.run, 0.0, id="held", task_queue="skew-lease"
        )
        ghost = await store.claim_workflow_task("default", "skew-lease", "ghost", LEASE_MS)
        assert ghost is not None
        stop = await run_worker(address, "skew-lease")
        try:
            assert await handle.result(timeout=30) == "woke"
        finally:
            await stop()
    finally:
        await client.close()
    events = await full_history(store, "held")
    first_done = next(e for e in events if e.HasField("workflow_task_completed"))
    taken_over_at = first_done.workflow_task_completed.workflow_time.ToMilliseconds()
    assert first_done.workflow_task_completed.worker_id != "ghost"
    assert taken_over_at >= ghost.lease_expires_at_ms, (
        f"taken over {ghost.lease_expires_at_ms - taken_over_at} ms before the lease expired"
    )
