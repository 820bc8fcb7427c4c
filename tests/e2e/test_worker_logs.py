"""What a worker logs, through a real server process.

A failed activity attempt is one WARNING naming its type, message and attempt; a failed
workflow task is one WARNING per attempt and never asyncio's "Task exception was never
retrieved"; a server outage is one line when the worker loses the server and one when it
is back, however many polls, heartbeats and reports failed in between.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from datetime import timedelta

import pytest

from durable_rpc import Client, Worker, activity, workflow
from durable_rpc.workflow import RetryPolicy
from tests.e2e.conftest import ServerProcess

pytestmark = pytest.mark.timeout(120)

ATTEMPTS: list[int] = []
WORKFLOW_TASKS: list[int] = []


@activity.defn
async def flaky_charge(amount: int) -> str:
    attempt = activity.info().attempt
    ATTEMPTS.append(attempt)
    if attempt < 3:
        raise ConnectionError(f"card network down (try {attempt})")
    return f"charged {amount}"


@workflow.defn(name="FlakyCharge")
class FlakyCharge:
    @workflow.run
    async def run(self, amount: int) -> str:
        return str(
            await workflow.execute_activity(
                flaky_charge,
                amount,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
            )
        )


@workflow.defn(name="FlakyTask")
class FlakyTask:
    """Its first two workflow tasks fail (a forbidden call); the third succeeds."""

    @workflow.run
    async def run(self) -> str:
        WORKFLOW_TASKS.append(1)
        if len(WORKFLOW_TASKS) < 3:
            asyncio.get_running_loop().run_in_executor(None, print)
        return "decided"


def worker_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("durable_rpc")]


async def test_a_failed_activity_attempt_is_one_warning_with_type_message_and_attempt(
    server: ServerProcess, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durable_rpc")
    ATTEMPTS.clear()
    async with Worker(
        client, task_queue="logs-a", workflows=[FlakyCharge], activities=[flaky_charge]
    ):
        handle = await client.start_workflow(FlakyCharge.run, 5, id="charge", task_queue="logs-a")
        assert await handle.result(timeout=30) == "charged 5"
    assert ATTEMPTS == [1, 2, 3]
    failed = [r for r in worker_lines(caplog) if "flaky_charge" in r.getMessage()]
    assert [r.levelno for r in failed] == [logging.WARNING] * 2, [r.getMessage() for r in failed]
    for attempt, record in enumerate(failed, start=1):
        message = record.getMessage()
        assert f"attempt {attempt} failed" in message, message
        assert f"ConnectionError: card network down (try {attempt})" in message, message
        assert "of workflow charge" in message, message
        # The server's answer: the retry policy's delay, 50 ms doubling.
        assert message.endswith(f"retry in {0.05 * 2 ** (attempt - 1):g} s"), message


async def test_a_failed_workflow_task_is_one_warning_per_attempt(
    server: ServerProcess, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durable_rpc")
    WORKFLOW_TASKS.clear()
    async with Worker(client, task_queue="logs-w", workflows=[FlakyTask]):
        handle = await client.start_workflow(FlakyTask.run, id="flaky-task", task_queue="logs-w")
        assert await handle.result(timeout=30) == "decided"
    failed = [
        (r.levelno, r.getMessage())
        for r in worker_lines(caplog)
        if "workflow task" in r.getMessage()
    ]
    assert [level for level, _ in failed] == [logging.WARNING] * 2, failed
    for attempt, (_, message) in enumerate(failed, start=1):
        assert "flaky-task (FlakyTask" in message, message
        assert f"attempt {attempt} failed: WorkflowTaskError" in message, message
        assert "run_in_executor" in message, message
        assert "; retry in " in message, message  # the server's backoff for this attempt
    # The failed tasks' workflow loops, once collected, have nothing left to report.
    caplog.clear()
    gc.collect()
    assert not [r.getMessage() for r in worker_lines(caplog)]


async def test_a_server_outage_is_one_line_lost_and_one_line_back(
    server: ServerProcess, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durable_rpc")
    ATTEMPTS.clear()
    worker = Worker(client, task_queue="logs-o", workflows=[FlakyCharge], activities=[flaky_charge])
    async with worker:
        first = await client.start_workflow(FlakyCharge.run, 1, id="before", task_queue="logs-o")
        assert await first.result(timeout=30) == "charged 1"
        caplog.clear()
        server.kill()
        # Down for a few seconds: every poll cycle and the heartbeat fail, again and again.
        await asyncio.sleep(3)
        server.start()
        await asyncio.wait_for(client.channel.channel_ready(), 30)
        ATTEMPTS.clear()
        after = await client.start_workflow(FlakyCharge.run, 2, id="after", task_queue="logs-o")
        assert await after.result(timeout=60) == "charged 2"
    # Everything the worker said since the kill, but the second run's failed attempts.
    said = [m for m in (r.getMessage() for r in worker_lines(caplog)) if "flaky_charge" not in m]
    lost = [m for m in said if "lost the server" in m]
    back = [m for m in said if "the server is back after" in m]
    assert len(lost) == 1 and len(back) == 1, said
    assert said == [lost[0], back[0]], said
    outage_s = float(back[0].split("back after ")[1].split(" s")[0])
    assert outage_s >= 3.0, back[0]
    assert not worker.link.is_down
