"""A finished activity never runs again because its report came late: a real server
process killed and restarted on the same SQLite file and port while the report waits, and
a real worker process SIGSTOPped past its leases then continued."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from durable_rpc import Client
from tests.e2e import apps
from tests.e2e.conftest import ServerProcess, WorkerProcess, eventually, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def test_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executions.log"
    path.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(path))
    return path


def lines(path: Path, prefix: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith(prefix)]


def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("outage_s", [15.0])
async def test_a_report_made_during_a_server_outage_lands_after_the_restart(
    server: ServerProcess,
    spawn_worker: Callable[..., WorkerProcess],
    test_log: Path,
    outage_s: float,
) -> None:
    q = queue()
    worker = spawn_worker(server.address, q)
    client = await Client.connect(server.address)
    # A 2 s lease (start_to_close): it expires, by database time, during the outage.
    await client.start_workflow(apps.HeldStep.run, "outage", 2.0, id="outage-1", task_queue=q)
    wait_for(lambda: lines(test_log, "slow_step-start"), what="the activity to start")
    await client.close()
    server.kill()
    worker.proc.send_signal(signal.SIGUSR1)  # the activity finishes while the server is down
    wait_for(lambda: lines(test_log, "slow_step-end"), what="the activity to finish")
    await asyncio.sleep(outage_s)  # the outage itself (its length is the parameter)
    server.start()
    back = time.monotonic()
    client = await Client.connect(server.address)
    try:
        handle = client.get_handle("outage-1")
        assert await handle.result(timeout=60) == "done:outage"
        print(f"run completed {time.monotonic() - back:.2f}s after the server was back")
        assert len(lines(test_log, "slow_step-start")) == 1, "the finished activity ran again"
        history = await handle.history()
        completed = [e.activity_completed for e in history if e.HasField("activity_completed")]
        assert [(c.attempt, c.fencing_token) for c in completed] == [(1, 1)]
        assert not [e for e in history if e.HasField("activity_failed")]
    finally:
        await client.close()


@pytest.mark.also_on_postgres
async def test_a_worker_paused_past_its_leases_reports_once_continued(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., WorkerProcess],
    test_log: Path,
) -> None:
    q = queue()
    worker = spawn_worker(server.address, q)
    count = 15
    # 15 activities in flight, heartbeating, each with a 2 s lease (the heartbeat timeout).
    handle = await client.start_workflow(apps.Naps.run, count, 4.0, 2.0, id="naps-1", task_queue=q)
    wait_for(lambda: len(lines(test_log, "nap-start")) == count, what="every activity to start")
    worker.proc.send_signal(signal.SIGSTOP)
    try:

        async def every_lease_expired() -> bool:
            # The server's expiry pass turned each silent attempt into a retry (attempt 2).
            pending = (await handle.describe()).pending_activities
            return len(pending) == count and all(p.attempt >= 2 for p in pending)

        await eventually(every_lease_expired, timeout=60, what="the leases to expire")
    finally:
        worker.proc.send_signal(signal.SIGCONT)
    result = await handle.result(timeout=60)
    assert result == [f"rested:{index}" for index in range(count)]
    starts = Counter(line.split()[0] for line in lines(test_log, "nap-start"))
    assert starts == Counter({f"nap-start:{index}": 1 for index in range(count)}), (
        "an activity that finished ran again"
    )
    history = await handle.history()
    assert sum(e.HasField("activity_completed") for e in history) == count
    assert not [e for e in history if e.HasField("activity_failed")]
