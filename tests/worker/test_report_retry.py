"""Reports the server could not take: retried until it answers, abandoned only on
shutdown (after a bounded grace); a lease that lapsed locally does not stop its attempt."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from durable_rpc import payload
from durable_rpc.errors import LeaseLostError, StoreUnavailableError
from durable_rpc.worker import CancellationToken, WorkflowSupervisor, _report_retry
from tests.worker.fake_service import FakeClient, eventually
from tests.worker.test_worker import FAST, activity_task, new_worker, progress, run_until


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_report_retry, "INITIAL_BACKOFF_S", 0.001)
    monkeypatch.setattr(_report_retry, "MAX_BACKOFF_S", 0.005)


async def test_a_report_is_retried_until_the_server_answers() -> None:
    client = FakeClient()
    # Far more failures than the old fixed 4 tries.
    client.service.errors["CompleteActivityTask"].extend(
        StoreUnavailableError("server unavailable") for _ in range(30)
    )
    await client.service.activity_tasks.put(activity_task(81, "double", 4))
    report = await run_until(
        client,
        new_worker(client, workflows=[]),
        lambda: len(client.service.calls["CompleteActivityTask"]) == 31,
    )
    assert (report.completions, report.errors, report.lease_losses) == (1, 0, 0)
    last = client.service.calls["CompleteActivityTask"][-1]
    assert (last.lease.task_id, payload.decode(last.result.data)) == (81, 8)


async def test_a_definitive_answer_ends_the_retries() -> None:
    client = FakeClient()
    client.service.errors["CompleteActivityTask"].extend(
        [*(StoreUnavailableError("down") for _ in range(5)), LeaseLostError("taken over")]
    )
    await client.service.activity_tasks.put(activity_task(82, "double", 1))
    report = await run_until(
        client,
        new_worker(client, workflows=[]),
        lambda: len(client.service.calls["CompleteActivityTask"]) == 6,
    )
    assert (report.completions, report.lease_losses) == (0, 1)
    assert len(client.service.calls["CompleteActivityTask"]) == 6


async def test_shutdown_abandons_a_failing_report_after_its_grace() -> None:
    client = FakeClient()
    client.service.errors["CompleteActivityTask"].extend(
        StoreUnavailableError("down") for _ in range(100_000)
    )
    await client.service.activity_tasks.put(activity_task(83, "double", 1))
    worker = new_worker(client, workflows=[], shutdown_report_grace=timedelta(seconds=0.3))
    token = CancellationToken()
    run = asyncio.ensure_future(WorkflowSupervisor(worker, FAST).run(token))
    await eventually(lambda: client.service.calls["CompleteActivityTask"])
    token.cancel()
    cancelled_at = time.monotonic()
    report = await asyncio.wait_for(run, 5)
    # The grace, plus at most one backoff pause and the deregistration.
    assert time.monotonic() - cancelled_at < 1.5
    assert report.completions == 0 and report.errors == 1
    assert len(client.service.calls["DeregisterWorker"]) == 1


async def test_a_lease_that_lapsed_locally_keeps_its_attempt_running() -> None:
    progress.clear()
    client = FakeClient()
    # Heartbeats fail (the server is unreachable) well past the 100 ms lease.
    client.service.errors["HeartbeatActivityTask"].extend(
        StoreUnavailableError("down") for _ in range(2)
    )
    await client.service.activity_tasks.put(activity_task(84, "slow", 14, heartbeat_ms=100))
    worker = new_worker(client, workflows=[])
    report = await run_until(client, worker, lambda: client.service.calls["CompleteActivityTask"])
    assert len(progress) == 14, "the attempt was stopped"
    (complete,) = client.service.calls["CompleteActivityTask"]
    assert payload.decode(complete.result.data) == "finished"
    assert (report.completions, report.lease_losses, worker.lease_losses) == (1, 0, 0)
    # Heartbeats went on after the local lapse, and the later ones landed.
    assert len(client.service.calls["HeartbeatActivityTask"]) > 2


async def test_a_retry_claimed_by_the_same_worker_reports_the_held_outcome() -> None:
    progress.clear()
    client = FakeClient()
    # The finished attempt's report keeps failing while this worker's own poll takes the
    # retry (token 8); then it is answered LEASE_LOST.
    calls = client.service.calls["CompleteActivityTask"]
    client.service.errors["CompleteActivityTask"].extend(
        [*(StoreUnavailableError("down") for _ in range(200)), LeaseLostError("taken over")]
    )
    await client.service.activity_tasks.put(activity_task(91, "slow", 5))
    retry = activity_task(91, "slow", 5)
    retry.fencing_token, retry.attempt = 8, 2
    token = CancellationToken()
    worker = new_worker(client, workflows=[])
    run = asyncio.ensure_future(WorkflowSupervisor(worker, FAST).run(token))
    await eventually(lambda: calls)  # the attempt finished; its report is pending
    await client.service.activity_tasks.put(retry)
    await eventually(lambda: calls[-1].lease.fencing_token == 8)
    token.cancel()
    report = await asyncio.wait_for(run, 5)
    assert len(progress) == 5, "the activity ran again"
    assert [c.lease.fencing_token for c in calls] == [7] * 201 + [8]
    assert payload.decode(calls[-1].result.data) == "finished"
    assert (report.claims, report.completions, report.lease_losses) == (2, 1, 1)


async def test_a_retry_claimed_while_the_attempt_still_runs_restarts_it() -> None:
    progress.clear()
    client = FakeClient()
    await client.service.activity_tasks.put(activity_task(92, "slow", 5))
    retry = activity_task(92, "slow", 5)
    retry.fencing_token, retry.attempt = 8, 2
    token = CancellationToken()
    worker = new_worker(client, workflows=[])
    run = asyncio.ensure_future(WorkflowSupervisor(worker, FAST).run(token))
    await eventually(lambda: progress)  # attempt 1 (token 7) is running
    await client.service.activity_tasks.put(retry)
    calls = client.service.calls["CompleteActivityTask"]
    await eventually(lambda: calls)
    token.cancel()
    report = await asyncio.wait_for(run, 5)
    # The claim proved attempt 1's lease lost: it was stopped, attempt 2 ran afresh.
    assert [c.lease.fencing_token for c in calls] == [8]
    assert progress.count("step-0") == 2 and len(progress) < 10
    assert (report.claims, report.completions, report.lease_losses) == (2, 1, 1)
