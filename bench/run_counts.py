"""What the runs page's counts by status cost: the old way (one list of the newest 1,000
matching runs, counted in Python: wrong beyond 1,000) against ``count_runs`` (one
``GROUP BY status``, exact), interleaved in one window so machine noise hits both alike.

Starts ``--runs`` runs (a tenth of them terminated) in a fresh store, then alternates
the two reads ``--repeat`` times, without and with a search-attribute query, and prints
the median and p95 of each (ms) and the counts each saw.

    python bench/run_counts.py                       # SQLite file in a temp dir
    python bench/run_counts.py --pg-url postgresql://postgres@127.0.0.1:48131/postgres
    python bench/run_counts.py --runs 20000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import _checkout  # noqa: F401  (measure this checkout's package: import before durable_rpc)
from _scratch import scratch_store

from durable_rpc.search_attributes import to_proto
from durable_rpc.store import StartOptions, Store
from durable_rpc.v1 import payload_pb2

NS = "default"
WINDOW = 1000  # what the runs page listed to count before CountWorkflows
QUERIES = {"all": None, "search attribute": 'Region = "eu"'}


async def _fill(store: Store, runs: int) -> None:
    data = payload_pb2.Payload(data=b"x").SerializeToString()
    regions = [
        StartOptions(search_attributes=to_proto({"Region": r}).SerializeToString())
        for r in ("eu", "us")
    ]

    async def start(i: int) -> None:
        await store.start_workflow(
            NS, f"wf-{i}", "Order", "1", "q", data, f"r-{i}", options=regions[i % 2]
        )
        if i % 10 == 0:
            await store.terminate(NS, f"wf-{i}", None, "bench")

    for at in range(0, runs, 200):
        await asyncio.gather(*(start(i) for i in range(at, min(runs, at + 200))))


async def _old(store: Store, query: str | None) -> dict[str, int]:
    window, _ = await store.list_runs(NS, None, None, None, None, WINDOW, None, query)
    return dict(Counter(run.status for run in window))


async def _new(store: Store, query: str | None) -> dict[str, int]:
    return await store.count_runs(NS, None, None, None, None, query)


async def _timed(read: Callable[[], Awaitable[dict[str, int]]]) -> tuple[float, dict[str, int]]:
    began = time.perf_counter()
    counts = await read()
    return (time.perf_counter() - began) * 1000, counts


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--pg-url", default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "backend": "postgres" if args.pg_url else "sqlite-file",
        "runs": args.runs,
    }
    async with scratch_store(args.pg_url, "counts") as store:
        await _fill(store, args.runs)
        for label, query in QUERIES.items():
            times: dict[str, list[float]] = {"list_1000_and_count": [], "count_runs": []}
            seen: dict[str, dict[str, int]] = {}
            for _ in range(args.repeat):  # A, B, A, B, ...: the same noise for both
                for name, read in (("list_1000_and_count", _old), ("count_runs", _new)):
                    ms, counts = await _timed(lambda read=read, q=query: read(store, q))
                    times[name].append(ms)
                    seen[name] = counts
            results[label] = {
                name: {**_summary(samples), "counts": seen[name]} for name, samples in times.items()
            }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{results['backend']}, {args.runs} runs, {args.repeat} interleaved rounds")
    for label in QUERIES:
        for name, figures in results[label].items():
            print(
                f"  {label:17} {name:20} median {figures['median_ms']:8.2f} ms  "
                f"p95 {figures['p95_ms']:8.2f} ms  counts {figures['counts']}"
            )


if __name__ == "__main__":
    asyncio.run(main())
