"""Checks that the tests catch a broken core rule of the store.

Each ``scripts/mutants/*.diff`` breaks one rule by a single change: a unified diff against
the current tree, headed by ``# rule: <the rule>`` and ``# must fail: <pytest arguments>``.
For each, this copies the tree (``python/``, with the compiled ``_core`` extension, and
``tests/``) into a temporary directory, applies the diff there and runs the selected tests
with this checkout's interpreter, the copy's ``python/`` first on ``PYTHONPATH``. A mutant
whose tests all pass survived. The working tree is never modified.

Usage: ``.venv/bin/python scripts/mutants.py [NAME ...]`` with ``DURABLE_RPC_TEST_PG_URL``
set (some mutants break PostgreSQL only). ``--no-baseline`` skips the check that each
selection passes on the unchanged copy. Exits 1 when a mutant survived or a run failed to
apply or collect.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS = ROOT / "scripts" / "mutants"
COPIED = ("python", "tests", "pyproject.toml")
#: pytest's exit code when tests ran and some failed (others: usage, collection errors).
TESTS_FAILED = 1


@dataclass(frozen=True)
class Mutant:
    name: str
    rule: str
    selection: list[str]
    diff: Path

    @classmethod
    def read(cls, diff: Path) -> Mutant:
        header: dict[str, str] = {}
        for line in diff.read_text().splitlines():
            if not line.startswith("# "):
                break
            key, _, value = line[2:].partition(": ")
            header[key] = value
        if "rule" not in header or "must fail" not in header:
            raise SystemExit(f"{diff.name}: needs '# rule:' and '# must fail:' header lines")
        return cls(diff.stem, header["rule"], shlex.split(header["must fail"]), diff)


def copy_tree(into: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, into / name, ignore=ignore)
        else:
            shutil.copy2(source, into / name)


def apply(mutant: Mutant, tree: Path) -> str | None:
    """Applies the diff in ``tree``; the reason it did not apply, else None."""
    done = subprocess.run(
        ["patch", "-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-i", str(mutant.diff)],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    return None if done.returncode == 0 else (done.stdout + done.stderr).strip()


def run_tests(mutant: Mutant, tree: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "python"), str(tree)])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *mutant.selection],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    summary = done.stdout.strip().splitlines()[-1:] or [done.stderr.strip()[-200:]]
    return done.returncode, summary[0]


def judge(mutant: Mutant, baseline: bool) -> tuple[str, str, float]:
    """(verdict, detail, seconds): killed, SURVIVED, or an error that makes it unjudged."""
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.name}-") as scratch:
        tree = Path(scratch)
        copy_tree(tree)
        if baseline:
            code, summary = run_tests(mutant, tree)
            if code != 0:
                return "BASELINE FAILS", summary, time.monotonic() - began
        refused = apply(mutant, tree)
        if refused is not None:
            return "DOES NOT APPLY", refused.splitlines()[-1], time.monotonic() - began
        code, summary = run_tests(mutant, tree)
    seconds = time.monotonic() - began
    if code == TESTS_FAILED:
        return "killed", summary, seconds
    if code == 0:
        return "SURVIVED", summary, seconds
    return f"ERROR (pytest exit {code})", summary, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--no-baseline", action="store_true")
    args = parser.parse_args()
    mutants = [Mutant.read(diff) for diff in sorted(MUTANTS.glob("*.diff"))]
    if args.names:
        unknown = set(args.names) - {m.name for m in mutants}
        if unknown:
            raise SystemExit(f"unknown mutants: {', '.join(sorted(unknown))}")
        mutants = [m for m in mutants if m.name in args.names]
    if not os.environ.get("DURABLE_RPC_TEST_PG_URL"):
        raise SystemExit("set DURABLE_RPC_TEST_PG_URL: some mutants break PostgreSQL only")

    began = time.monotonic()
    rows = []
    for mutant in mutants:
        verdict, detail, seconds = judge(mutant, baseline=not args.no_baseline)
        rows.append((mutant, verdict, detail, seconds))
        print(f"{mutant.name}: {verdict} ({seconds:.0f} s) {detail}", flush=True)

    width = max(len(m.name) for m, *_ in rows)
    print(f"\n{'mutant':<{width}}  {'verdict':<14}  {'s':>4}  rule")
    for mutant, verdict, _, seconds in rows:
        print(f"{mutant.name:<{width}}  {verdict:<14}  {seconds:>4.0f}  {mutant.rule}")
    print(f"\n{len(rows)} mutants in {time.monotonic() - began:.0f} s")
    return 0 if all(verdict == "killed" for _, verdict, *_ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
