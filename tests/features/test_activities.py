"""Activity features end to end: heartbeat details, heartbeat timeout, cancellation
through heartbeats, retry policies and schedule deadlines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.client import WorkflowCancelledError
from tests.e2e.conftest import eventually
from tests.features import apps
from tests.features.conftest import FeatureWorker, lines

pytestmark = pytest.mark.timeout(120)


async def test_next_attempt_resumes_from_the_last_heartbeat_details(
    client: Client, worker: FeatureWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(apps.Heartbeats.run, "resume", id="hb-1", task_queue=queue)
    assert await handle.result(timeout=30) == "finished from 5"
    assert lines(test_log, "resumable") == [
        "resumable attempt=1 from=0 note=fresh",
        "resumable attempt=2 from=5 note=after-5",
    ]


async def test_an_attempt_that_stops_heartbeating_is_timed_out_and_retried(
    client: Client, worker: FeatureWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(apps.Heartbeats.run, "hang", id="hb-2", task_queue=queue)
    started = time.monotonic()
    assert await handle.result(timeout=30) == "ok on attempt 2"
    # Attempt 1 hangs for 8s; the 1s heartbeat timeout ends it well before that.
    assert time.monotonic() - started < 7
    history = await handle.history()
    (completed,) = [e.activity_completed for e in history if e.HasField("activity_completed")]
    assert completed.attempt == 2


async def test_cancelling_the_workflow_cancels_the_activity_and_runs_cleanup(
    client: Client, worker: FeatureWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(apps.Cancellable.run, id="cx-1", task_queue=queue)
    await eventually(lambda: lines(test_log, "wait_for_cancel started"), what="activity start")
    await handle.cancel("user asked")
    with pytest.raises(WorkflowCancelledError):
        await handle.result(timeout=30)
    await eventually(lambda: lines(test_log, "wait_for_cancel cancelled"), what="cancellation")
    assert lines(test_log, "cleanup:") == ["cleanup:after-cancel"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("runtime", "4:RuntimeError"),  # maximum_attempts
        ("non-retryable-app", "1:Fatal"),  # ApplicationError(non_retryable=True)
        ("value-error", "1:ValueError"),  # non_retryable_error_types
    ],
)
async def test_retry_policy(
    client: Client, worker: FeatureWorker, test_log: Path, queue: str, kind: str, expected: str
) -> None:
    started = time.monotonic()
    handle = await client.start_workflow(apps.Retries.run, kind, id=f"r-{kind}", task_queue=queue)
    assert await handle.result(timeout=30) == expected
    attempts = int(expected.split(":")[0])
    assert len(lines(test_log, f"flaky:{kind}")) == attempts
    if kind == "runtime":
        # Delays 50ms, then 500ms and 5s capped by maximum_interval at 200ms.
        assert time.monotonic() - started < 4


@pytest.mark.parametrize("which", ["schedule_to_start", "schedule_to_close"])
async def test_schedule_deadlines_fail_the_activity_with_a_timeout(
    client: Client, worker: FeatureWorker, queue: str, which: str
) -> None:
    handle = await client.start_workflow(
        apps.Deadlines.run, which, id=f"d-{which}", task_queue=queue
    )
    assert await handle.result(timeout=30) == "ActivityTimeoutError"
