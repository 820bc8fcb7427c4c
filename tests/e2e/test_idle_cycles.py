"""A worker's claim cycles: every one polls while tasks arrive faster than the polls take
them, and only the always-polling ones once the queue is quiet (each idle poll costs the
server a claim attempt per deadline). A real server (SQLite file, gRPC over a socket)
and a real worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_rpc import Client, activity
from durable_rpc.server import Server, ServerConfig
from durable_rpc.worker import CancellationToken, Worker, WorkflowSupervisor
from durable_rpc.worker import WorkflowSupervisorConfig as Config
from tests.e2e.test_handoff import until
from tests.e2e.test_poll_wakeups import QUEUE, schedule_activity

pytestmark = pytest.mark.timeout(120)
ACTIVITY_KEY = ("default", QUEUE, "activity")
MAX_CYCLES = 12
IDLE_CYCLES = 2


class Held:
    """Activities that run until released, and how many run at once."""

    def __init__(self) -> None:
        self.running = 0
        self.peak = 0
        self.finished = 0
        self.release = asyncio.Event()

    async def hold(self) -> None:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
            self.finished += 1


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    config = ServerConfig(
        db_url=f"sqlite:///{tmp_path / 'cycles.db'}", listen="127.0.0.1:0", poll_timeout_s=1
    )
    running = Server(config)
    await running.start()
    yield running
    await running.stop()


def test_the_default_worker_runs_many_cycles_and_keeps_few_polls_while_idle() -> None:
    config = Config.default()
    assert config.max_concurrency == 64
    assert config.idle_cycles == 8
    with pytest.raises(ValueError, match="idle_cycles"):
        Config(4, idle_cycles=0)


async def test_parked_cycles_resume_under_load_and_park_again_when_quiet(server: Server) -> None:
    assert server.handoffs is not None and server.store is not None
    waiters = server.handoffs.waiters
    held = Held()

    @activity.defn(name="hold")
    async def hold() -> None:
        await held.hold()

    async with await Client.connect(f"127.0.0.1:{server.port}") as client:
        worker = Worker(
            client, task_queue=QUEUE, activities=[hold], max_concurrent_activities=MAX_CYCLES
        )
        config = Config(MAX_CYCLES, idle_cycles=IDLE_CYCLES).with_backoff(0.01, 0.05)
        token = CancellationToken()
        run = asyncio.ensure_future(WorkflowSupervisor(worker, config).run(token))
        try:
            # Only the always-polling cycles poll while nothing arrives.
            await until(lambda: waiters.waiting(ACTIVITY_KEY) == IDLE_CYCLES, "idle polls")
            before = server.store.stats.operations
            seen: list[int] = []

            def polled_again() -> bool:
                seen.append(waiters.waiting(ACTIVITY_KEY))
                return server.store.stats.operations >= before + 2 * IDLE_CYCLES

            # Two more deadlines of the idle polls: nobody parked came back meanwhile.
            await until(polled_again, "the idle polls to poll again")
            assert max(seen) == IDLE_CYCLES

            # More tasks than cycles: the polls fall behind and the parked cycles resume.
            for i in range(3 * MAX_CYCLES):
                await schedule_activity(client, f"load-{i}", "hold")
            await until(lambda: held.running == MAX_CYCLES, "every cycle to run a task")
            held.release.set()
            await until(lambda: held.finished == 3 * MAX_CYCLES, "the activities")

            # Quiet again: back to the always-polling cycles' polls.
            await until(lambda: waiters.waiting(ACTIVITY_KEY) == IDLE_CYCLES, "cycles to park")
        finally:
            held.release.set()
            token.cancel()
        report = await asyncio.wait_for(run, 10)
    assert report.activity_tasks == 3 * MAX_CYCLES
    assert report.completions == 3 * MAX_CYCLES
    assert held.peak == MAX_CYCLES
