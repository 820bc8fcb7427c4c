"""workflow.Saga: compensations in reverse order, durable across a worker crash."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from durable_rpc import Client
from tests.e2e.conftest import ServerProcess, wait_for
from tests.features import apps
from tests.features.conftest import FeatureWorker, lines

pytestmark = pytest.mark.timeout(120)


async def test_third_step_fails_compensations_run_in_reverse_once_across_a_worker_crash(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., FeatureWorker],
    test_log: Path,
    queue: str,
) -> None:
    first = spawn_worker(server.address, queue)  # blocks in the flight compensation
    handle = await client.start_workflow(apps.Trip.run, id="trip-1", task_queue=queue)
    wait_for(lambda: lines(test_log, "undo-start:flight"), what="the last compensation")
    first.kill()  # kill -9 in the middle of compensating
    spawn_worker(server.address, queue, "--release")
    assert await handle.result(timeout=60) == "compensated after no cars left"
    assert lines(test_log, "book:") == ["book:flight", "book:hotel", "book:car"]
    assert lines(test_log, "undo-done:") == ["undo-done:hotel", "undo-done:flight"]
    assert lines(test_log, "undo-start:hotel") == ["undo-start:hotel"], "re-ran a completed one"


async def test_continue_on_error_collects_every_failure(
    client: Client, worker: FeatureWorker, test_log: Path, queue: str
) -> None:
    lenient = await client.start_workflow(apps.LenientSaga.run, True, id="ls-1", task_queue=queue)
    assert await lenient.result(timeout=30) == ["ActivityError"]
    assert lines(test_log, "undo:") == ["undo:c", "undo:b", "undo:a"]


async def test_by_default_the_first_failing_compensation_stops_the_rest(
    client: Client, worker: FeatureWorker, test_log: Path, queue: str
) -> None:
    strict = await client.start_workflow(apps.LenientSaga.run, False, id="ls-2", task_queue=queue)
    assert await strict.result(timeout=30) == ["ActivityError"]
    assert lines(test_log, "undo:") == ["undo:c", "undo:b"]
