"""The web UI in headless Chromium against a server with ``--auth``: signing in on the
page, a client key's terminate button disabled with the reason, an admin terminating, a
sign-in form on another site refused."""

from __future__ import annotations

import asyncio
import contextlib
import html
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from durable_rpc import Client
from tests.e2e.conftest import free_port
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


@contextlib.contextmanager
def another_site(page: str) -> Iterator[str]:
    """A web server on another port of this host serving ``page`` (same site, other
    origin: what a local program's page is to the UI)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_a_sign_in_form_on_another_site_does_not_sign_the_browser_in(
    auth_stack: AuthStack, driver: Any
) -> None:
    driver.delete_all_cookies()
    driver.get(auth_stack.ui.url + "/signin")  # a visitor of the UI, holding its cookies
    action = html.escape(auth_stack.ui.url + "/signin")
    key = html.escape(auth_stack.client_key)
    page = (
        f'<form id="f" method="post" action="{action}">'
        f'<input name="api_key" value="{key}"><input name="next" value="/"></form>'
        '<script>document.getElementById("f").submit()</script>'
    )
    with another_site(page) as url:
        driver.get(url)
        wait(driver, lambda d: d.current_url.startswith(auth_stack.ui.url))
    assert "CSRF check failed" in driver.find_element(By.ID, "error").text
    assert driver.get_cookie("drpc_ui_session") is None
    driver.get(auth_stack.ui.url + "/n/default/runs")
    wait(driver, lambda d: d.find_element(By.ID, "api_key"))
