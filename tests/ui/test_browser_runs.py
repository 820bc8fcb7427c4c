"""The web UI in headless Chromium against a real server (no authentication), a real
worker and real runs: the runs list filters, a run's timeline, "why stuck", a signal sent
from the page, terminate with its confirmation, bad input answered on the page."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from durable_rpc import Client
from tests.ui.browser import driver, read_live, screenshot, wait
from tests.ui.conftest import Stack

__all__ = ["driver"]  # the module's browser fixture
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def runs(stack: Stack) -> Iterator[dict[str, str]]:
    """A finished two-activity run (its first activity failed once), two runs waiting
    for a signal, and a run on a queue no worker serves."""

    async def go() -> dict[str, str]:
        async with await Client.connect(stack.server.address) as c:
            two = await c.start_workflow("TwoActivities", "order-7", id="two-1", task_queue="ui-q")
            await two.result()
            ids = {"two": str(two.run_id)}
            for wid in ("approve-1", "approve-2"):
                handle = await c.start_workflow("Approval", id=wid, task_queue="ui-q")
                ids[wid] = str(handle.run_id)
            stuck = await c.start_workflow(
                "TwoActivities", "lost", id="stuck-1", task_queue="nobody-serves-this"
            )
            ids["stuck"] = str(stuck.run_id)
            return ids

    yield asyncio.run(go())


def result_of(stack: Stack, workflow_id: str) -> Any:
    async def go() -> Any:
        async with await Client.connect(stack.server.address) as c:
            return await asyncio.wait_for(c.get_handle(workflow_id).result(), 30)

    return asyncio.run(go())


def shown_ids(driver: Any) -> set[str]:
    def read(d: Any) -> set[str]:
        rows = d.find_elements(By.CSS_SELECTOR, "tr.run")
        return {r.get_attribute("data-workflow-id") for r in rows}

    return set(read_live(driver, read))


def text_of(driver: Any, by: str, selector: str) -> str:
    return str(read_live(driver, lambda d: d.find_element(by, selector).text))


def test_the_runs_list_filters_by_status_and_query(
    stack: Stack, runs: dict[str, str], driver: Any
) -> None:
    driver.get(f"{stack.ui.url}/n/default/runs")
    wait(driver, lambda d: {"two-1", "approve-1", "stuck-1"} <= shown_ids(d))
    running = read_live(
        driver,
        lambda d: d.find_element(By.CSS_SELECTOR, '#counts [data-status="running"]').get_attribute(
            "data-count"
        ),
    )
    assert int(running) >= 3
    screenshot(driver, "runs")
    Select(driver.find_element(By.ID, "f-status")).select_by_value("completed")
    driver.find_element(By.ID, "apply-filters").click()
    wait(driver, lambda d: "status=completed" in d.current_url)
    assert shown_ids(driver) == {"two-1"}
    query = driver.find_element(By.ID, "f-q")
    query.clear()
    Select(driver.find_element(By.ID, "f-status")).select_by_value("")
    query.send_keys('WorkflowType = "Approval"')
    query.submit()  # Enter in the form: the keyboard path
    wait(driver, lambda d: "WorkflowType" in d.current_url)
    assert shown_ids(driver) >= {"approve-1", "approve-2"} and "two-1" not in shown_ids(driver)


def test_a_malformed_query_and_an_unknown_run_are_answered_on_the_page(
    stack: Stack, driver: Any
) -> None:
    driver.get(f"{stack.ui.url}/n/default/runs?q=WorkflowType%20%3D")
    error = wait(driver, lambda d: d.find_element(By.ID, "error"))
    assert error.text.startswith("INVALID_ARGUMENT: invalid query")
    assert driver.find_element(By.ID, "f-q").get_attribute("value") == "WorkflowType ="
    driver.get(f"{stack.ui.url}/n/default/runs/no-such-run")
    error = wait(driver, lambda d: d.find_element(By.ID, "error"))
    assert "NOT_FOUND" in error.text and "no-such-run" in error.text
    assert "Traceback" not in driver.page_source


def test_the_run_detail_draws_one_bar_per_activity_and_marks_the_failed_attempt(
    stack: Stack, runs: dict[str, str], driver: Any
) -> None:
    driver.get(f"{stack.ui.url}/n/default/runs/two-1?run={runs['two']}")
    svg = wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#timeline svg"))
    bars = svg.find_elements(By.CSS_SELECTOR, 'g.bar[data-kind="activity"]')
    assert len(bars) == 2
    failed = svg.find_elements(By.CSS_SELECTOR, "rect.attempt.failed")
    assert len(failed) == 1
    assert driver.find_element(By.ID, "run-status").text == "completed"
    assert '"flaky:order-7"' in driver.find_element(By.ID, "run-result").text
    assert '"order-7"' in driver.find_element(By.ID, "run-input").text
    kinds = [
        e.get_attribute("data-kind") for e in driver.find_elements(By.CSS_SELECTOR, "tr.event")
    ]
    assert kinds[0] == "workflow_started" and kinds.count("activity_completed") == 2
    screenshot(driver, "run-detail")
    # Zoom: the first 10 ms of the run leave the later bars clipped or out.
    driver.find_element(By.ID, "z-to").send_keys("0.01")
    driver.find_element(By.ID, "z-to").submit()
    wait(driver, lambda d: "to=0.01" in d.current_url)
    svg = driver.find_element(By.CSS_SELECTOR, "#timeline svg")
    assert int(svg.get_attribute("data-end-ms")) - int(svg.get_attribute("data-start-ms")) <= 10


def test_why_stuck_is_said_at_the_top_for_a_run_no_worker_serves(
    stack: Stack, runs: dict[str, str], driver: Any
) -> None:
    driver.get(f"{stack.ui.url}/n/default/runs/stuck-1")
    reason = wait(driver, lambda d: d.find_element(By.ID, "stuck-reason").text)
    assert "No live worker" in reason and "nobody-serves-this" in reason
    screenshot(driver, "stuck-run")


def test_a_signal_sent_from_the_page_reaches_the_workflow(
    stack: Stack, runs: dict[str, str], driver: Any
) -> None:
    driver.get(f"{stack.ui.url}/n/default/runs/approve-1")
    driver.find_element(By.ID, "sig-name").send_keys("approve")
    driver.find_element(By.ID, "sig-input").send_keys('"from-the-browser"')
    driver.find_element(By.ID, "signal-button").click()
    question = wait(driver, lambda d: d.find_element(By.ID, "confirm-question"))
    assert "signal" in question.text
    driver.find_element(By.ID, "confirm").click()
    assert result_of(stack, "approve-1") == "approved:from-the-browser"
    # The open page updated itself (live updates) once the run completed.
    wait(driver, lambda d: d.find_element(By.ID, "run-status").text == "completed")


def test_bad_signal_input_is_answered_on_the_page(
    stack: Stack, runs: dict[str, str], driver: Any
) -> None:
    driver.get(f"{stack.ui.url}/n/default/runs/approve-2")
    driver.find_element(By.ID, "sig-name").send_keys("approve")
    driver.find_element(By.ID, "sig-input").send_keys("{not json")
    driver.find_element(By.ID, "signal-button").click()
    error = wait(driver, lambda d: d.find_element(By.ID, "error"))
    assert error.text.startswith("the signal input is not JSON")


def test_terminate_asks_for_confirmation_then_terminates(
    stack: Stack, runs: dict[str, str], driver: Any
) -> None:
    driver.get(f"{stack.ui.url}/n/default/runs/approve-2")
    driver.find_element(By.ID, "term-reason").send_keys("stopped from the browser")
    driver.find_element(By.ID, "terminate-button").click()
    wait(driver, lambda d: d.find_element(By.ID, "confirm-question"))
    driver.find_element(By.ID, "cancel-confirm").click()  # "No": nothing happens
    wait(driver, lambda d: d.find_element(By.ID, "run-status"))
    assert text_of(driver, By.ID, "run-status") == "running"
    driver.find_element(By.ID, "term-reason").send_keys("stopped from the browser")
    driver.find_element(By.ID, "terminate-button").click()
    wait(driver, lambda d: d.find_element(By.ID, "confirm")).click()
    wait(driver, lambda d: d.find_element(By.ID, "run-status").text == "terminated")
    assert "stopped from the browser" in driver.find_element(By.ID, "run-result").text


def test_the_fleet_pages_show_the_worker_and_its_queue(stack: Stack, driver: Any) -> None:
    driver.get(f"{stack.ui.url}/n/default/task-queues?queue=ui-q")
    pollers = wait(driver, lambda d: d.find_element(By.ID, "pollers"))
    assert "No live worker" not in pollers.text
    driver.get(f"{stack.ui.url}/n/default/workers")
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.worker")
    assert rows and "ui-q" in rows[0].text
    driver.get(f"{stack.ui.url}/namespaces")
    assert "default" in driver.find_element(By.ID, "namespaces").text


def test_the_pages_fit_a_phone_sized_screen(
    stack: Stack, runs: dict[str, str], driver: Any
) -> None:
    driver.set_window_size(390, 844)
    try:
        for path in ("/n/default/runs", "/n/default/runs/two-1"):
            driver.get(stack.ui.url + path)
            wait(driver, lambda d: d.find_element(By.ID, "main"))
            overflow = driver.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
            assert overflow <= 1, (path, overflow)
    finally:
        driver.set_window_size(1280, 900)


def test_a_pending_activity_shows_its_next_retry_heartbeat_and_failure(
    stack: Stack, driver: Any
) -> None:
    async def go() -> None:
        async with await Client.connect(stack.server.address) as c:
            await c.start_workflow("Resumable", 100, id="resumable-1", task_queue="ui-q")

    asyncio.run(go())
    driver.get(f"{stack.ui.url}/n/default/runs/resumable-1")
    # The page updates itself while the run is open: the attempt fails, then waits.
    waiting = 'tr.pending[data-state="waiting"]'
    wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, waiting))

    def read(d: Any) -> tuple[str, str, str, str, int]:
        row = d.find_element(By.CSS_SELECTOR, waiting)
        svg = d.find_element(By.CSS_SELECTOR, "#timeline svg")
        return (
            row.find_element(By.CSS_SELECTOR, ".next-retry").text,
            row.find_element(By.CSS_SELECTOR, ".heartbeat").text,
            row.text,
            d.find_element(By.ID, "stuck-reason").text,
            len(svg.find_elements(By.CSS_SELECTOR, "rect.attempt.failed")),
        )

    next_retry, heartbeat, row_text, stuck, failed_attempts = read_live(driver, read)
    assert "retry at " in next_retry
    assert '"row 41 of 100"' in heartbeat
    assert "the target table is locked" in row_text
    assert "in backoff until" in stuck
    # The history records no attempt of an open activity: the timeline takes its failed
    # first attempt from describe's pending activities.
    assert failed_attempts


def test_a_run_whose_id_holds_slashes_and_a_space_opens_and_takes_a_signal(
    stack: Stack, driver: Any
) -> None:
    workflow_id = "orders/2026/a b"

    async def start() -> None:
        async with await Client.connect(stack.server.address) as c:
            await c.start_workflow("Approval", id=workflow_id, task_queue="ui-q")

    asyncio.run(start())
    driver.get(f"{stack.ui.url}/n/default/runs?type=Approval")
    wait(driver, lambda d: workflow_id in shown_ids(d))
    row = f'tr.run[data-workflow-id="{workflow_id}"] a'
    read_live(driver, lambda d: d.find_element(By.CSS_SELECTOR, row).click())
    wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "h1").text.startswith(workflow_id))
    assert text_of(driver, By.ID, "run-status") == "running"
    driver.find_element(By.ID, "sig-name").send_keys("approve")
    driver.find_element(By.ID, "sig-input").send_keys('"slashed"')
    driver.find_element(By.ID, "signal-button").click()
    wait(driver, lambda d: d.find_element(By.ID, "confirm")).click()
    assert result_of(stack, workflow_id) == "approved:slashed"
    wait(driver, lambda d: d.find_element(By.ID, "run-status").text == "completed")
    assert driver.current_url.startswith(f"{stack.ui.url}/n/default/runs/orders%2F2026%2Fa%20b")
