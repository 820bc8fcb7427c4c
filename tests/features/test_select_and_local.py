"""Activity cancellation from workflow code and workflow.select(), end to end: a server
process on a SQLite file and a worker process running tests/features/select_apps.py.
Every finished run is also replayed with the Replayer (the recorded cancellation
commands must match)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.client import WorkflowHandle
from durable_rpc.testing import Replayer
from durable_rpc.v1 import history_pb2
from tests.e2e.conftest import ROOT, ServerProcess, WorkerProcess, eventually
from tests.features import select_apps
from tests.features.conftest import lines

pytestmark = pytest.mark.timeout(120)


class SelectWorker(WorkerProcess):
    """A worker process running ``tests.features.select_apps``."""

    def __init__(self, address: str, task_queue: str, log_dir: Path) -> None:
        self.log_path = log_dir / f"worker-{task_queue}-{time.monotonic_ns()}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.features.select_apps", address, task_queue],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )


@pytest.fixture
def select_worker(
    server: ServerProcess, queue: str, test_log: Path, tmp_path: Path
) -> Iterator[SelectWorker]:
    worker = SelectWorker(server.address, queue, tmp_path)
    yield worker
    worker.stop()


Run = Callable[..., object]


async def _replays(handle: WorkflowHandle[object]) -> list[history_pb2.HistoryEvent]:
    events = await handle.history()
    result = Replayer(select_apps.WORKFLOWS).replay(history_pb2.History(events=events))
    assert result.ok, result
    return events


def _kinds(events: list[history_pb2.HistoryEvent]) -> list[str]:
    return [str(e.WhichOneof("attributes")) for e in events]


async def test_select_returns_the_first_and_cancels_a_queued_loser(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.SelectQueued.run, id=f"sel-q-{queue}", task_queue=queue
    )
    assert await handle.result(timeout=30) == "winner"
    events = await _replays(handle)
    (requested,) = [
        e.activity_cancel_requested for e in events if e.HasField("activity_cancel_requested")
    ]
    assert requested.seq == 2
    # The run completed in the task that cancelled the loser: the loser's task was
    # cancelled with it, no ActivityCancelled follows the completion.
    assert _kinds(events)[-2:] == ["activity_cancel_requested", "workflow_completed"]
    assert lines(test_log, "never_runs") == []
    assert lines(test_log, "quick") == ["quick:winner"]


async def test_cancelling_a_queued_activity_raises_cancelled_in_the_awaiting_code(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.CancelQueued.run, id=f"cx-q-{queue}", task_queue=queue
    )
    assert await handle.result(timeout=30) == "cancelled"
    events = await _replays(handle)
    kinds = _kinds(events)
    # The cancellation is an input event delivered to a later task.
    assert kinds.index("activity_cancel_requested") < kinds.index("activity_cancelled")
    assert kinds[-1] == "workflow_completed"
    (cancelled,) = [e.activity_cancelled for e in events if e.HasField("activity_cancelled")]
    assert (cancelled.seq, cancelled.attempt) == (2, 0)  # seq 1 is the timer
    assert lines(test_log, "never_runs") == []


async def test_cancelling_a_running_activity_goes_through_its_heartbeats(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.CancelRunning.run, "obeys", id=f"cx-r-{queue}", task_queue=queue
    )
    assert await handle.result(timeout=30) == "cancelled"
    events = await _replays(handle)
    (cancelled,) = [e.activity_cancelled for e in events if e.HasField("activity_cancelled")]
    assert cancelled.seq == 2  # seq 1 is the timer
    assert cancelled.attempt == 1
    assert not any(e.HasField("activity_failed") for e in events)
    assert lines(test_log, "waits_for_cancel") == [
        "waits_for_cancel started",
        "waits_for_cancel cancelled",
    ]


async def test_an_activity_that_completes_despite_the_cancel_keeps_its_result(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.CancelRunning.run, "ignores", id=f"cx-i-{queue}", task_queue=queue
    )
    assert await handle.result(timeout=30) == "result:done anyway"
    kinds = _kinds(await _replays(handle))
    assert "activity_cancel_requested" in kinds
    assert "activity_completed" in kinds
    assert "activity_cancelled" not in kinds
    assert lines(test_log, "finishes_anyway") == [
        "finishes_anyway started",
        "finishes_anyway finishing despite cancel",
    ]


async def test_select_never_cancels_a_loser_that_already_finished(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.SelectFinished.run, id=f"sel-f-{queue}", task_queue=queue
    )
    assert await handle.result(timeout=30) == ["first", "second"]
    kinds = _kinds(await _replays(handle))
    assert "activity_cancel_requested" not in kinds
    assert kinds.count("activity_completed") == 2


async def test_gather_of_activities_and_a_timer_is_deterministic(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.Gathered.run, id=f"gather-{queue}", task_queue=queue
    )
    assert await handle.result(timeout=30) == ["a", "b"]
    events = await _replays(handle)
    scheduled = [e.activity_scheduled.seq for e in events if e.HasField("activity_scheduled")]
    timers = [e.timer_started.seq for e in events if e.HasField("timer_started")]
    # Seqs follow the argument order of gather(), whatever finishes first.
    assert (scheduled, timers) == ([1, 3], [2])


# --- local activities -------------------------------------------------------------------


def _local_markers(events: list[history_pb2.HistoryEvent]) -> list[history_pb2.MarkerRecorded]:
    return [
        e.marker_recorded
        for e in events
        if e.HasField("marker_recorded") and e.marker_recorded.kind == "local_activity"
    ]


async def test_local_activity_is_recorded_and_never_rerun_even_across_a_worker_kill(
    client: Client, server: ServerProcess, queue: str, test_log: Path, tmp_path: Path
) -> None:
    first = SelectWorker(server.address, queue, tmp_path)
    try:
        handle = await client.start_workflow(
            select_apps.LocalOnce.run, "x", id=f"local-{queue}", task_queue=queue
        )

        async def recorded() -> bool:
            return bool(_local_markers(await handle.history()))

        await eventually(recorded, what="the local activity's marker")
        first.kill()
    finally:
        first.stop()
    # A new worker replays the first task (the marker) and never runs the function.
    second = SelectWorker(server.address, queue, tmp_path)
    try:
        await handle.signal(select_apps.LocalOnce.release)
        assert await handle.result(timeout=30) == "local x/after"
    finally:
        second.stop()
    assert lines(test_log, "local:") == ["local:x"]
    events = await _replays(handle)
    (marker,) = _local_markers(events)
    assert (marker.seq, marker.id) == (1, "")
    assert lines(test_log, "local:") == ["local:x"]  # the Replayer did not run it either
    # No activity task was ever scheduled for it: only "quick" went through the server.
    assert [
        e.activity_scheduled.activity_type for e in events if e.HasField("activity_scheduled")
    ] == ["quick"]


async def test_local_activity_is_retried_locally(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.LocalRetry.run, "flaky", id=f"local-r-{queue}", task_queue=queue
    )
    assert await handle.result(timeout=30) == "ok on attempt 3"
    assert len(lines(test_log, "flaky_local:flaky")) == 3
    (marker,) = _local_markers(await _replays(handle))
    assert marker.id == ""


async def test_local_activity_final_failure_is_recorded(
    client: Client, select_worker: SelectWorker, test_log: Path, queue: str
) -> None:
    handle = await client.start_workflow(
        select_apps.LocalRetry.run, "fatal", id=f"local-f-{queue}", task_queue=queue
    )
    result = await handle.result(timeout=30)
    assert result.startswith("failed after 4: ")
    assert "attempt 4 failed" in result
    assert len(lines(test_log, "flaky_local:fatal")) == 4
    (marker,) = _local_markers(await _replays(handle))
    assert marker.id == "failed"
