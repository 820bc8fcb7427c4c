"""The command line, run as a user would."""

from __future__ import annotations

import subprocess
import sys


def test_selfcheck_prints_the_fingerprint() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "durable_rpc.cli", "selfcheck"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "fingerprint e2a33dff55802237" in out.stdout
