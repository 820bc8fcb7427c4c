"""The examples run as documented (the standalone ones; hello_world and order_saga need a
server and are exercised by the e2e suites' equivalents)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_example(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_tour_shows_every_feature_working() -> None:
    out = run_example("tour.py")
    assert "query: awaiting approval" in out
    assert "update: approved by ada" in out
    assert "'quote': 42" in out and "'shipped': 'shipped o-1'" in out
    assert "'receipt': 'local note for o-1'" in out and "'rate': 0.2" in out
    assert "list CustomerId = c-7: ['order-o-1']" in out
    assert "continue-as-new chain result: 30" in out


def test_versioning_example_replays_old_and_new_runs() -> None:
    out = run_example("versioning.py")
    assert "patched replay:" in out and ": ok" in out
