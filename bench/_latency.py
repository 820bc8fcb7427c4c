"""The latency percentile both sides of the hello benchmarks report (ours in e2e_bench.py,
DBOS's in dbos_hello.py), so their p50/p99 follow one rule. Standard library only:
dbos_hello.py imports it from DBOS's own venv."""

from __future__ import annotations


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        raise ValueError("no values to take a percentile of")
    ordered = sorted(values)
    rank = max(1, int(-(-pct * len(ordered) // 100)))
    return ordered[rank - 1]
