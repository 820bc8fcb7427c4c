"""Warm workflow tasks through a real server and worker: what the sticky cache saves.

One run is given a long history first (``--prefill`` signals, delivered in one burst to
its first task), then receives ``--updates`` updates one after another; each update is
one workflow task that, with the run kept by the worker, applies only its new events.
Reports the update round trip (p50/p99, ms), the worker process's CPU per task (the
whole process: server and client run in it too, as ``WorkflowEnvironment`` does) and
the cache's counters. ``--cold`` runs the same with the cache off (``max_entries=0``):
every task replays the whole history.

    python bench/sticky_cache.py [--prefill 2000] [--updates 200] [--cold] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import _checkout  # noqa: F401  (measure this checkout)

from durable_rpc import Worker, workflow
from durable_rpc.testing import WorkflowEnvironment


@workflow.defn(name="BenchSticky")
class BenchSticky:
    def __init__(self) -> None:
        self.total = 0
        self.done = False

    @workflow.signal
    def add(self, n: int) -> None:
        self.total += n

    @workflow.update
    def bump(self, n: int) -> int:
        self.total += n
        return self.total

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.done)
        return self.total


def sticky_worker(env: WorkflowEnvironment, cold: bool) -> Worker:
    options: dict[str, Any] = {}
    try:  # this checkout's cache options; an older checkout has only the entry count
        from durable_rpc import StickyCacheOptions

        options["sticky_cache"] = StickyCacheOptions(max_entries=0 if cold else 1000)
    except ImportError:
        options["sticky_cache_size"] = 0 if cold else 1000
    return Worker(env.client, task_queue="sticky-bench", workflows=[BenchSticky], **options)


def cache_counters(worker: Worker) -> dict[str, int]:
    metrics = getattr(worker, "sticky_cache_metrics", None)
    if metrics is not None:
        m = metrics()
        return {
            "hits": m.hits,
            "misses": m.misses,
            "evictions": m.evictions,
            "forced_cold_replays": m.forced_cold_replays,
            "history_bytes": m.history_bytes,
        }
    live = worker.live_runs
    return {"hits": live.hits if live is not None else 0}


async def measure(prefill: int, updates: int, cold: bool) -> dict[str, Any]:
    async with await WorkflowEnvironment.start_local() as env:
        handle = await env.client.start_workflow(
            BenchSticky.run, id="sticky-bench", task_queue="sticky-bench"
        )
        for n in range(prefill):
            await handle.signal(BenchSticky.add, n)
        async with sticky_worker(env, cold) as worker:
            await handle.execute_update(BenchSticky.bump, 0)  # the first task: cold
            took: list[float] = []
            cpu = time.process_time()
            for n in range(updates):
                began = time.perf_counter()
                await handle.execute_update(BenchSticky.bump, n)
                took.append(time.perf_counter() - began)
            cpu = time.process_time() - cpu
            counters = cache_counters(worker)
            await handle.signal(BenchSticky.finish)
            await handle.result(timeout=60)
        events = len(await handle.history())
    took.sort()
    return {
        "benchmark": "sticky_cache",
        "cold": cold,
        "history_events": events,
        "update_p50_ms": statistics.median(took) * 1000,
        "update_p99_ms": took[min(len(took) - 1, int(len(took) * 0.99))] * 1000,
        "cpu_ms_per_task": cpu / updates * 1000,
        "cache": counters,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefill", type=int, default=2000, help="signals before timing")
    parser.add_argument("--updates", type=int, default=200, help="timed updates")
    parser.add_argument("--cold", action="store_true", help="cache off (max_entries=0)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(measure(args.prefill, args.updates, args.cold))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{'cold' if result['cold'] else 'warm'}: {result['history_events']} events, update "
        f"p50 {result['update_p50_ms']:.2f} ms p99 {result['update_p99_ms']:.2f} ms, "
        f"{result['cpu_ms_per_task']:.2f} ms CPU a task, cache {result['cache']}"
    )


if __name__ == "__main__":
    main()
