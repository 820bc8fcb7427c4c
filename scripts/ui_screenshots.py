"""Take the web UI's screenshots for docs/ui/ with the browser tests' own headless Chromium.

    python scripts/ui_screenshots.py [OUT_DIR]     # default: docs/ui

Runs tests/ui/test_browser_runs.py (a real server, worker, runs and UI) with
DURABLE_RPC_UI_SCREENSHOTS set, so its runs list, run detail and stuck run tests each save
the page they checked: runs.png, run-detail.png, stuck-run.png.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "docs" / "ui").resolve()
    env = {**os.environ, "DURABLE_RPC_UI_SCREENSHOTS": str(out)}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/ui/test_browser_runs.py",
        "-k",
        "runs_list or run_detail or stuck",
    ]
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if done.returncode == 0:
        for name in ("runs", "run-detail", "stuck-run"):
            print(out / f"{name}.png")
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
