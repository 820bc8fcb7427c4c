"""DBOS Transact's side of the hello workload, for bench/peers.py.

The workload bench/e2e_bench.py runs through durable-rpc, written for DBOS: a workflow
calling two steps one after the other, each returning a short string. DBOS is a library,
so this one process both starts the workflows and runs them; its only server is the
system database (an SQLite file, opened in this process, or a PostgreSQL database).

The phases are e2e_bench's: --warmup runs one after another, not measured; --latency runs
one after another, each timed from its start to its result (p50/p99, nearest rank, as
e2e_bench computes them); then, --reps times, --n runs started at once and waited for
(throughput: n divided by the time until the last result). ``--mode sync`` starts them
with ``DBOS.start_workflow`` from this thread (they run on DBOS's thread pool); ``--mode
async`` starts async workflows with ``DBOS.start_workflow_async`` on one event loop.

It prints one JSON object and appends it, as one line, to --results:

- ``latency_ms``: ``n``, ``p50``, ``p99``, ``min``, ``max``, ``mean``;
- ``throughput``: one ``{"n", "seconds", "wf_per_s"}`` per rep;
- ``cpu_s_during_bench``: CPU seconds over the three phases of this process
  (``app_worker``) and, with --pg-pid, of that cluster's postgres processes (``postgres``);
- ``worker_peak_rss_mb``: this process's peak RSS (VmHWM, MiB); with --pg-pid,
  ``server_peak_rss_mb``: the largest of the cluster's processes;
- ``params``: ``warmup``, ``latency``, ``n``, ``reps``; ``versions``; ``store``; ``mode``.

It needs a venv with ``dbos`` (bench/peers.py makes one) and imports nothing else outside
the standard library but this directory's _proc.py and _latency.py.

    python bench/dbos_hello.py --db sqlite --sqlite-file FILE --results FILE [--n 500]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

from _latency import percentile
from _proc import cpu_s, peak_rss_mib, postgres_cpu_s, postgres_peak_rss_mib
from dbos import DBOS, DBOSConfig


@DBOS.step()
def say_hello(name: str) -> str:
    return f"Hello, {name}!"


@DBOS.step()
def say_bye(name: str) -> str:
    return f"Bye, {name}!"


@DBOS.workflow()
def hello(name: str) -> str:
    return f"{say_hello(name)} {say_bye(name)}"


@DBOS.step()
async def say_hello_async(name: str) -> str:
    return f"Hello, {name}!"


@DBOS.step()
async def say_bye_async(name: str) -> str:
    return f"Bye, {name}!"


@DBOS.workflow()
async def hello_async(name: str) -> str:
    return f"{await say_hello_async(name)} {await say_bye_async(name)}"


def expected(name: str) -> str:
    return f"Hello, {name}! Bye, {name}!"


def latency_figures(seconds: list[float]) -> dict[str, float]:
    millis = [value * 1e3 for value in seconds]
    return {
        "n": len(millis),
        "p50": percentile(millis, 50),
        "p99": percentile(millis, 99),
        "min": min(millis),
        "max": max(millis),
        "mean": sum(millis) / len(millis),
    }


def throughput_entry(n: int, seconds: float) -> dict[str, float]:
    return {"n": n, "seconds": seconds, "wf_per_s": n / seconds}


def check(names: list[str], results: list[str]) -> None:
    for name, result in zip(names, results, strict=True):
        if result != expected(name):
            raise SystemExit(f"workflow {name} returned {result!r}")


def phases_sync(args: argparse.Namespace) -> tuple[list[float], list[dict[str, float]]]:
    """(latency seconds, throughput entries), starting workflows from this thread."""

    def one(name: str) -> float:
        began = time.perf_counter()
        result = DBOS.start_workflow(hello, name).get_result()
        took = time.perf_counter() - began
        check([name], [result])
        return took

    for i in range(args.warmup):
        one(f"warmup-{i}")
    latencies = [one(f"sequential-{i}") for i in range(args.latency)]
    entries = []
    for rep in range(args.reps):
        names = [f"rep{rep}-{i}" for i in range(args.n)]
        began = time.perf_counter()
        handles = [DBOS.start_workflow(hello, name) for name in names]
        results = [handle.get_result() for handle in handles]
        entries.append(throughput_entry(args.n, time.perf_counter() - began))
        check(names, results)
    return latencies, entries


async def phases_async(args: argparse.Namespace) -> tuple[list[float], list[dict[str, float]]]:
    """(latency seconds, throughput entries), starting async workflows on this loop."""

    async def one(name: str) -> str:
        handle = await DBOS.start_workflow_async(hello_async, name)
        result: str = await handle.get_result()
        return result

    async def timed(name: str) -> float:
        began = time.perf_counter()
        result = await one(name)
        took = time.perf_counter() - began
        check([name], [result])
        return took

    for i in range(args.warmup):
        await timed(f"warmup-{i}")
    latencies = [await timed(f"sequential-{i}") for i in range(args.latency)]
    entries = []
    for rep in range(args.reps):
        names = [f"rep{rep}-{i}" for i in range(args.n)]
        began = time.perf_counter()
        results = await asyncio.gather(*(one(name) for name in names))
        entries.append(throughput_entry(args.n, time.perf_counter() - began))
        check(names, list(results))
    return latencies, entries


def system_database(args: argparse.Namespace) -> tuple[str, str]:
    """(DBOS's system database URL, the store's description); a fresh SQLite file."""
    if args.db == "postgres":
        return args.pg_url, "postgres"
    path = Path(args.sqlite_file).resolve()
    for suffix in ("", "-wal", "-shm", "-journal"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    return f"sqlite:///{path}", "sqlite-file"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--sqlite-file", help="DBOS's database file (--db sqlite); reset")
    parser.add_argument("--pg-url", help="DBOS's database (--db postgres); reset")
    parser.add_argument(
        "--pg-pid", type=int, help="postmaster PID of --pg-url's cluster: its CPU and RSS"
    )
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--n", type=int, default=500, help="concurrent, for throughput")
    parser.add_argument("--latency", type=int, default=50, help="one after another, for p50")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--results", type=Path, required=True, help="JSONL file appended to")
    args = parser.parse_args()
    for name in ("n", "latency", "reps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    if args.db == "sqlite" and not args.sqlite_file:
        parser.error("--db sqlite needs --sqlite-file")
    if args.db == "postgres" and not args.pg_url:
        parser.error("--db postgres needs --pg-url")
    return args


def measure(args: argparse.Namespace, store: str) -> dict[str, Any]:
    """The three phases on a launched DBOS, and what they cost."""
    app_before = cpu_s(os.getpid())
    pg_before = postgres_cpu_s(args.pg_pid) if args.pg_pid else 0.0
    if args.mode == "sync":
        latencies, entries = phases_sync(args)
    else:
        latencies, entries = asyncio.run(phases_async(args))
    cpu = {"app_worker": cpu_s(os.getpid()) - app_before}
    record: dict[str, Any] = {
        "system": "dbos",
        "mode": args.mode,
        "store": store,
        "latency_ms": latency_figures(latencies),
        "throughput": entries,
        "cpu_s_during_bench": cpu,
        "worker_peak_rss_mb": peak_rss_mib(os.getpid()),
    }
    if args.pg_pid:
        cpu["postgres"] = postgres_cpu_s(args.pg_pid) - pg_before
        # Read while DBOS's pooled connections (their backends) are still open.
        record["server_peak_rss_mb"] = postgres_peak_rss_mib(args.pg_pid)
    return record


def main() -> None:
    args = parse_args()
    url, store = system_database(args)
    config: DBOSConfig = {
        "name": "durable-rpc-peers-hello",
        "system_database_url": url,
        "log_level": "WARNING",
    }
    DBOS(config=config)
    if args.db == "postgres":
        DBOS.reset_system_database()  # a fresh database for every run
    DBOS.launch()
    try:
        record = measure(args, store)
    finally:
        DBOS.destroy()
    record["params"] = {
        "warmup": args.warmup,
        "latency": args.latency,
        "n": args.n,
        "reps": args.reps,
    }
    record["versions"] = {
        "dbos": importlib.metadata.version("dbos"),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
    }
    print(json.dumps(record, indent=2), flush=True)
    with args.results.open("a") as results:
        results.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
