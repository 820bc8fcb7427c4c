"""Failures the UI answers on a page, over real HTTP: an unreachable server, an unknown
page, a bad page link, and the UI's own options refused with a reason."""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import ROOT, free_port
from tests.ui.conftest import Browserless, Stack, UiProcess

pytestmark = pytest.mark.timeout(120)


def test_an_unreachable_server_is_said_on_the_page(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"  # nothing listens there
    ui = UiProcess(dead, tmp_path / "ui.log")
    try:
        page = Browserless(ui.url).get("/n/default/runs")
    finally:
        ui.stop()
    assert page.status == 503
    assert f"no durable-rpc server answered at {dead}" in html.unescape(page.text)
    assert "Traceback" not in page.text and str(ROOT) not in page.text


def test_unknown_pages_and_bad_links_get_a_page_not_a_trace(stack: Stack) -> None:
    http = Browserless(stack.ui.url)
    missing = http.get("/no/such/page")
    assert missing.status == 404 and "no such page" in missing.text
    bad_status = http.get("/n/default/runs?status=sleeping")
    assert bad_status.status == 400 and "unknown status" in html.unescape(bad_status.text)
    bad_page = http.get("/n/default/runs?page=%%%")
    assert bad_page.status == 400 and "page link is malformed" in bad_page.text
    unknown_ns = http.get("/n/nowhere/runs")
    assert unknown_ns.status in (400, 404) and "nowhere" in html.unescape(unknown_ns.text)
    for reply in (missing, bad_status, bad_page, unknown_ns):
        assert "Traceback" not in reply.text and str(ROOT) not in reply.text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "nowhere"], "is not HOST:PORT"),
        (["--api-key-env", "UI_TEST_UNSET_VARIABLE"], "UI_TEST_UNSET_VARIABLE is not set"),
    ],
)
def test_bad_options_are_refused_with_a_reason(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "durable_rpc.cli", "ui", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 2 and message in done.stderr
