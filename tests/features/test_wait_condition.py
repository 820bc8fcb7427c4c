"""workflow.wait_condition(fn, timeout=...) with a durable timer, against a real server."""

from __future__ import annotations

import pytest

from durable_rpc import Client
from tests.e2e.conftest import eventually
from tests.features import apps
from tests.features.conftest import FeatureWorker

pytestmark = pytest.mark.timeout(120)


def kinds(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.WhichOneof("attributes") for e in events]


async def test_times_out_when_no_signal_comes(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.start_workflow(apps.Approval.run, 0.5, id="ap-1", task_queue=queue)
    assert await handle.result(timeout=30) == "timed out"
    history = kinds(await handle.history())
    assert "timer_fired" in history and "timer_cancelled" not in history


async def test_condition_first_cancels_the_timer(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.start_workflow(apps.Approval.run, 60.0, id="ap-2", task_queue=queue)

    async def timer_started() -> bool:
        return "timer_started" in kinds(await handle.history())

    await eventually(timer_started, what="the timeout timer")
    await handle.signal(apps.Approval.approve)
    assert await handle.result(timeout=30) == "approved"
    history = kinds(await handle.history())
    assert "timer_started" in history and "timer_cancelled" in history
    assert "timer_fired" not in history
