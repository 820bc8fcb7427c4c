"""The web UI in headless Chromium against a server with ``--auth``: signing in on the
page, a client key's terminate button disabled with the reason, an admin terminating."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from durable_rpc import Client
from tests.ui.browser import driver, read_live, wait
from tests.ui.conftest import AuthStack

__all__ = ["driver"]
pytestmark = pytest.mark.timeout(180)


def start_approval(stack: AuthStack, workflow_id: str) -> None:
    async def go() -> None:
        async with await Client.connect(stack.server.address, api_key=stack.admin_key) as c:
            await c.start_workflow("Approval", id=workflow_id, task_queue="ui-q")

    asyncio.run(go())


def sign_in(driver: Any, stack: AuthStack, key: str, path: str) -> None:
    driver.delete_all_cookies()
    driver.get(stack.ui.url + path)
    field = wait(driver, lambda d: d.find_element(By.ID, "api_key"))
    field.send_keys(key)
    field.submit()
    wait(driver, lambda d: d.find_element(By.ID, "caller"))
    assert driver.current_url.endswith(path)


def test_a_client_key_sees_why_it_cannot_terminate(auth_stack: AuthStack, driver: Any) -> None:
    start_approval(auth_stack, "b-client")
    sign_in(driver, auth_stack, auth_stack.client_key, "/n/default/runs/b-client")
    assert "client of namespace default" in driver.find_element(By.ID, "caller").text

    def read(d: Any) -> tuple[bool, str, str]:
        button = d.find_element(By.ID, "terminate-button")
        why = d.find_element(By.ID, "terminate-why").text
        return button.is_enabled(), button.get_attribute("title"), why

    enabled, title, why = read_live(driver, read)
    assert not enabled
    assert title == "terminate needs the admin role; your key is a client key"
    assert why == title


def test_an_admin_signs_in_and_terminates(auth_stack: AuthStack, driver: Any) -> None:
    start_approval(auth_stack, "b-admin")
    sign_in(driver, auth_stack, auth_stack.admin_key, "/n/default/runs/b-admin")
    driver.find_element(By.ID, "term-reason").send_keys("admin says stop")
    driver.find_element(By.ID, "terminate-button").click()
    wait(driver, lambda d: d.find_element(By.ID, "confirm")).click()
    wait(driver, lambda d: d.find_element(By.ID, "run-status").text == "terminated")
    driver.find_element(By.CSS_SELECTOR, ".who button").click()  # sign out
    wait(driver, lambda d: d.find_element(By.ID, "api_key"))
