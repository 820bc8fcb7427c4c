"""The web UI's actions over real HTTP against a real server and worker (no
authentication): batch terminate from a list query, redrive, schedule pause/unpause;
each confirmed first, nothing changed by the first POST."""

from __future__ import annotations

import asyncio
import html
from datetime import timedelta

import pytest

from durable_rpc import Client, ScheduleSpec
from durable_rpc.client import WorkflowFailureError
from tests.ui.conftest import Browserless, Stack

pytestmark = pytest.mark.timeout(120)
#: A search attribute only the batch signal test's runs carry.
REGION = {"Region": "batch-signal"}


def test_a_batch_terminates_the_runs_a_query_matches_after_confirming(stack: Stack) -> None:
    async def start() -> None:
        async with await Client.connect(stack.server.address) as c:
            for n in range(2):
                await c.start_workflow("Approval", id=f"batch-{n}", task_queue="ui-q")
            await c.start_workflow("Resumable", 5, id="batch-other", task_queue="ui-q")

    async def statuses() -> dict[str, str]:
        async with await Client.connect(stack.server.address) as c:
            ids = ("batch-0", "batch-1", "batch-other")
            return {i: str((await c.get_handle(i).describe()).info.status) for i in ids}

    asyncio.run(start())
    http = Browserless(stack.ui.url)
    page = http.get("/n/default/runs")
    query = 'WorkflowType = "Approval"'
    asked = http.post(
        "/n/default/batch",
        {"csrf": page.csrf(), "action": "terminate", "query": query, "reason": "cleanup"},
    )
    assert asked.status == 200
    assert "2 open run(s) matching" in html.unescape(asked.text)
    assert set(asyncio.run(statuses()).values()) == {"running"}
    batch_id = asked.text.split('name="batch_id" value="', 1)[1].split('"', 1)[0]
    done = http.post(
        "/n/default/batch",
        {
            "csrf": asked.csrf(),
            "action": "terminate",
            "query": query,
            "reason": "cleanup",
            "batch_id": batch_id,
            "confirmed": "yes",
        },
    )
    assert done.status == 200
    assert "2 matched, 2 acted on, 0 skipped, 0 failed" in done.text
    assert asyncio.run(statuses()) == {
        "batch-0": "terminated",
        "batch-1": "terminated",
        "batch-other": "running",
    }
    malformed = http.post(
        "/n/default/batch", {"csrf": page.csrf(), "action": "terminate", "query": "Oops ="}
    )
    assert malformed.status == 400 and "INVALID_ARGUMENT" in malformed.text


def test_a_batch_signal_reaches_each_matching_run_once(stack: Stack) -> None:
    async def start() -> None:
        async with await Client.connect(stack.server.address) as c:
            for n in range(3):
                await c.start_workflow(
                    "Approval", id=f"bsig-{n}", task_queue="ui-q", search_attributes=REGION
                )

    async def results() -> list[object]:
        async with await Client.connect(stack.server.address) as c:
            return [
                await asyncio.wait_for(c.get_handle(f"bsig-{n}").result(), 30) for n in range(3)
            ]

    asyncio.run(start())
    http = Browserless(stack.ui.url)
    page = http.get("/n/default/runs")
    fields = {
        "action": "signal",
        "query": 'Region = "batch-signal"',
        "signal_name": "approve",
        "input": '"from-a-batch"',
    }
    bad = http.post("/n/default/batch", {"csrf": page.csrf(), **fields, "input": "{nope"})
    assert bad.status == 400 and "the signal input is not JSON" in html.unescape(bad.text)
    nameless = http.post("/n/default/batch", {"csrf": page.csrf(), **fields, "signal_name": ""})
    assert nameless.status == 400 and "signal name is required" in html.unescape(nameless.text)
    asked = http.post("/n/default/batch", {"csrf": page.csrf(), **fields})
    assert asked.status == 200
    assert "batch signal 'approve' 3 open run(s) matching" in html.unescape(asked.text)
    batch_id = asked.text.split('name="batch_id" value="', 1)[1].split('"', 1)[0]
    confirmed = {"csrf": asked.csrf(), **fields, "batch_id": batch_id, "confirmed": "yes"}
    done = http.post("/n/default/batch", confirmed)
    assert done.status == 200
    assert "3 matched, 3 acted on, 0 skipped, 0 failed" in done.text
    assert asyncio.run(results()) == ["approved:from-a-batch"] * 3


def test_a_failed_run_is_redriven_from_its_page(stack: Stack) -> None:
    async def failed_run() -> str:
        async with await Client.connect(stack.server.address) as c:
            handle = await c.start_workflow("Broken", "order-9", id="broken-1", task_queue="ui-q")
            with pytest.raises(WorkflowFailureError):
                await handle.result()
            return str(handle.run_id)

    run_id = asyncio.run(failed_run())
    http = Browserless(stack.ui.url)
    page = http.get(f"/n/default/runs/broken-1?run={run_id}")
    assert 'id="redrive-button"' in page.text and 'id="terminate-button"' not in page.text
    asked = http.post("/n/default/runs/broken-1/redrive", {"csrf": page.csrf(), "run": run_id})
    assert 'id="confirm"' in asked.text
    done = http.post(
        "/n/default/runs/broken-1/redrive",
        {"csrf": asked.csrf(), "run": run_id, "confirmed": "yes"},
    )
    assert done.status == 200 and f"?run={run_id}" not in done.url
    assert "redriven from" in done.text and run_id in done.text


def test_a_schedule_is_paused_and_unpaused_from_its_page(stack: Stack) -> None:
    async def create() -> None:
        async with await Client.connect(stack.server.address) as c:
            await c.create_schedule(
                "hourly-approval",
                "Approval",
                spec=ScheduleSpec(interval=timedelta(hours=1)),
                task_queue="ui-q",
            )

    async def paused() -> bool:
        async with await Client.connect(stack.server.address) as c:
            return bool((await c.describe_schedule("hourly-approval")).paused)

    asyncio.run(create())
    http = Browserless(stack.ui.url)
    page = http.get("/n/default/schedules")
    assert 'id="schedule-hourly-approval"' in page.text and "Next: 20" in page.text
    http.post("/n/default/schedules/hourly-approval/pause", {"csrf": page.csrf(), "paused": "yes"})
    assert asyncio.run(paused())
    page = http.get("/n/default/schedules")
    assert "Unpause" in page.text and "paused from the web UI" in page.text
    http.post("/n/default/schedules/hourly-approval/pause", {"csrf": page.csrf(), "paused": "no"})
    assert not asyncio.run(paused())
