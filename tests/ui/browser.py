"""Headless Chromium through Selenium (Debian's ``chromium`` and ``chromium-driver``;
``.ci/run`` installs them when absent). One browser per test module: starting one costs
about a second, a page load a few milliseconds."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
#: A directory to save the docs' screenshots in (scripts/ui_screenshots.py sets it).
SCREENSHOTS_ENV = "DURABLE_RPC_UI_SCREENSHOTS"


def require_chromium() -> tuple[str, str]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        message = "headless Chromium is missing: apt-get install -y chromium chromium-driver"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM, CHROMEDRIVER


def make_driver(width: int = 1280, height: int = 900) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--disable-extensions",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    browser = make_driver()
    browser.set_page_load_timeout(30)
    try:
        yield browser
    finally:
        browser.quit()


def wait(driver: Any, condition: Callable[[Any], Any], timeout: float = 20.0) -> Any:
    """Waits until ``condition`` holds. Live updates swap page parts in place, so an
    element found by one step of a condition can be replaced before the next step reads
    it; that step is tried again (a stale element) rather than failing the test."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=ignored).until(
        condition
    )


def read_live(driver: Any, read: Callable[[Any], Any], attempts: int = 20) -> Any:
    """Returns ``read(driver)``, read again from the start when a live update replaced an
    element it was reading (the swap is one synchronous DOM step, so a fresh lookup finds
    the new element at once)."""
    from selenium.common.exceptions import StaleElementReferenceException

    for _ in range(attempts - 1):
        try:
            return read(driver)
        except StaleElementReferenceException:
            continue
    return read(driver)


def screenshot(driver: Any, name: str) -> None:
    """Saves the page as docs/ui/NAME.png when screenshots were asked for."""
    folder = os.environ.get(SCREENSHOTS_ENV)
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(max(int(height), 700), 2400))
    driver.save_screenshot(str(Path(folder) / f"{name}.png"))
    driver.set_window_size(1280, 900)
