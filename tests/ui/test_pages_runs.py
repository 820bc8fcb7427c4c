"""The runs page's counts by status over real HTTP, against a real server: exact for a
filter matching more runs than one list call returns (CountWorkflows, not a window of
the newest runs)."""

from __future__ import annotations

import asyncio
import html
import re
import urllib.parse

import pytest

from durable_rpc import Client
from tests.ui.conftest import Browserless, Stack

pytestmark = pytest.mark.timeout(240)

#: More matching runs than the old 1,000-run window and than twenty pages of the list.
MATCHING = 1010
TERMINATED = 4  # the oldest matching runs: the newest 1,000 would not include them
COUNT = re.compile(r'data-status="([a-z_]+)" data-count="(\d+)"')


@pytest.fixture(scope="module")
def bulk(stack: Stack) -> None:
    """Bulk runs in eu (the filter's), Bulk runs in us and Other runs in eu (not), on a
    queue no worker serves, so they stay running unless terminated."""

    async def go() -> None:
        async with await Client.connect(stack.server.address) as c:

            async def start(workflow_type: str, wid: str, region: str) -> None:
                await c.start_workflow(
                    workflow_type,
                    id=wid,
                    task_queue="count-q",
                    search_attributes={"Region": region},
                )

            for i in range(TERMINATED):
                await start("Bulk", f"bulk-eu-{i}", "eu")
                await c.get_handle(f"bulk-eu-{i}").terminate("oldest")
            rest = [("Bulk", f"bulk-eu-{i}", "eu") for i in range(TERMINATED, MATCHING)]
            rest += [("Bulk", f"bulk-us-{i}", "us") for i in range(20)]
            rest += [("Other", f"other-eu-{i}", "eu") for i in range(6)]
            for at in range(0, len(rest), 50):
                await asyncio.gather(*(start(*run) for run in rest[at : at + 50]))

    asyncio.run(go())


def test_the_counts_are_exact_across_more_runs_than_a_list_call(stack: Stack, bulk: None) -> None:
    http = Browserless(stack.ui.url)
    query = urllib.parse.urlencode({"type": "Bulk", "q": 'Region = "eu"'})

    page = http.get(f"/n/default/runs?{query}")

    assert page.status == 200, page.text[:2000]
    counts = {status: int(n) for status, n in COUNT.findall(page.text)}
    assert counts["running"] == MATCHING - TERMINATED
    assert counts["terminated"] == TERMINATED
    assert counts["completed"] == counts["failed"] == 0
    assert "newest" not in html.unescape(page.text)
    # A status filter narrows the list, not the counts (each links to its own list).
    narrowed = http.get(f"/n/default/runs?{query}&status=terminated")
    assert narrowed.status == 200
    assert {s: int(n) for s, n in COUNT.findall(narrowed.text)} == counts
    assert narrowed.text.count('class="run"') == TERMINATED


def test_a_batch_confirmation_counts_every_open_matching_run(stack: Stack, bulk: None) -> None:
    """The number of runs the operator is asked to confirm is exact too."""
    http = Browserless(stack.ui.url)
    page = http.get("/n/default/runs")
    assert page.status == 200

    asked = http.post(
        "/n/default/batch",
        {
            "csrf": page.csrf(),
            "action": "terminate",
            "query": 'WorkflowType = "Bulk" AND Region = "eu"',
        },
    )

    assert asked.status == 200, asked.text[:2000]
    assert f"{MATCHING - TERMINATED} open run(s) matching" in html.unescape(asked.text)


EVENT_ROW = re.compile(r'<tr class="event" data-kind="([a-z_]+)"><td>(\d+)</td>')
PAGER_LINK = re.compile(r'<a href="([^"]+)" rel="(first|earlier|later|latest)"')


def pager(text: str) -> dict[str, str]:
    return {rel: html.unescape(link) for link, rel in PAGER_LINK.findall(text)}


def test_a_long_history_is_shown_a_page_of_events_at_a_time(stack: Stack) -> None:
    """250 signals to a run no worker serves: over 250 events. The page shows the
    latest 200, with links to the earlier ones."""

    async def go() -> int:
        async with await Client.connect(stack.server.address) as c:
            handle = await c.start_workflow("Chatty", id="chatty-1", task_queue="count-q")
            for i in range(250):
                await handle.signal("note", i)
            return len(await handle.history())

    total = asyncio.run(go())
    assert total > 250
    http = Browserless(stack.ui.url)

    latest = http.get("/n/default/runs/chatty-1")
    assert latest.status == 200, latest.text[:2000]
    ids = [int(n) for _, n in EVENT_ROW.findall(latest.text)]
    assert ids == list(range(total - 199, total + 1))
    assert f"Events {total - 199} to {total} of {total}" in latest.text
    assert pager(latest.text) == {"first": "/n/default/runs/chatty-1?events_from=1"}

    first = http.get("/n/default/runs/chatty-1?events_from=1")
    rows = EVENT_ROW.findall(first.text)
    assert [int(n) for _, n in rows] == list(range(1, 201))
    assert rows[0][0] == "workflow_started"
    assert f"Events 1 to 200 of {total}" in first.text
    assert pager(first.text) == {
        "later": "/n/default/runs/chatty-1?events_from=201",
        "latest": "/n/default/runs/chatty-1",
    }
    rest = http.get("/n/default/runs/chatty-1?events_from=201")
    assert [int(n) for _, n in EVENT_ROW.findall(rest.text)] == list(range(201, total + 1))
    assert pager(http.get("/n/default/runs/chatty-1?events_from=202").text) == {
        "first": "/n/default/runs/chatty-1?events_from=1",
        "earlier": "/n/default/runs/chatty-1?events_from=2",
    }
    past = http.get("/n/default/runs/chatty-1?events_from=9999")
    assert f"Events {total - 199} to {total} of {total}" in past.text

    for bad, says in (("x", "is not an event id"), ("0", "they start at 1")):
        refused = http.get(f"/n/default/runs/chatty-1?events_from={bad}")
        assert refused.status == 400, refused.status
        assert says in html.unescape(refused.text)


def test_the_task_queues_page_lists_a_backlogged_queue_nobody_serves(stack: Stack) -> None:
    async def go() -> None:
        async with await Client.connect(stack.server.address) as c:
            await c.start_workflow("Lost", id="lost-1", task_queue="ui-unserved-q")

    asyncio.run(go())
    page = Browserless(stack.ui.url).get("/n/default/task-queues")
    assert page.status == 200, page.text[:2000]
    rows = re.findall(r'<tr class="(queue[a-z ]*)" data-queue="([^"]+)"', page.text)
    classes = {queue: cls for cls, queue in rows}
    assert classes["ui-unserved-q"] == "queue unserved"
    assert classes[stack.task_queue] == "queue", "the stack's worker serves its queue"
    unserved = page.text.split('data-queue="ui-unserved-q"', 1)[1].split("</tr>", 1)[0]
    assert "(no live worker)" in unserved and "<td>1</td>" in unserved
