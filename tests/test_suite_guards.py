"""Guards of the test suite itself: a hung test must fail the run, never stall CI."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.conftest import ROOT

STUCK_TEST = """
import signal
import time


def test_stuck_where_no_signal_handler_can_run():
    # A main thread that Python signal handlers cannot reach, as one blocked in a C
    # call is: the signal timeout method never fires here.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGINT})
    time.sleep(3600)
"""


def test_a_stuck_test_is_ended_by_its_timeout(tmp_path: Path) -> None:
    (tmp_path / "test_stuck.py").write_text(STUCK_TEST)
    began = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ROOT / "pyproject.toml"),
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:cacheprovider",
            "-o",
            "timeout=2",
            str(tmp_path / "test_stuck.py"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode != 0
    assert "Timeout" in done.stdout + done.stderr
    assert time.monotonic() - began < 60
