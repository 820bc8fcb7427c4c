"""What the fleet's reads cost: ListWorkers over many workers, DescribeTaskQueue over a
backlog, and describe (with its stuck reason).

Registers ``--workers`` workers (over ``--queues`` task queues, two definitions and one
activity each), queues ``--backlog`` workflow tasks on queue q0 (runs with no worker of
their definition), then times each read ``--repeat`` times (median and p95, in ms). The
reads are a fixed number of statements whatever the number of workers, so on PostgreSQL
(a round trip a statement) ListWorkers of thousands of workers stays a few round trips.

    python bench/fleet_reads.py                       # SQLite file in a temp dir
    python bench/fleet_reads.py --pg-url postgresql://postgres@127.0.0.1:56101/postgres
    python bench/fleet_reads.py --workers 5000 --backlog 20000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _scratch import scratch_store

from durable_rpc.store import Store, WorkerCounters
from durable_rpc.v1 import payload_pb2

NS = "default"


async def _fill(store: Store, workers: int, queues: int, backlog: int) -> None:
    async def register(i: int) -> None:
        definitions = [("Order", "1", "fp-order"), (f"Flow{i % 50}", "1", f"fp-{i % 50}")]
        worker = f"worker-{i:06}"
        await store.register_worker(
            NS, worker, f"q{i % queues}", definitions, ["charge"], f"b-{i % 3}", False
        )
        await store.worker_heartbeat(NS, worker, WorkerCounters(claims=i, slots_total=8))

    for start in range(0, workers, 200):
        await asyncio.gather(*(register(i) for i in range(start, min(workers, start + 200))))
    data = payload_pb2.Payload(data=b"x").SerializeToString()
    for start in range(0, backlog, 200):
        await asyncio.gather(
            *(
                store.start_workflow(NS, f"wf-{i}", "Unserved", "1", "q0", data, f"r-{i}")
                for i in range(start, min(backlog, start + 200))
            )
        )


async def _time(fn: Callable[[], Awaitable[Any]], repeat: int) -> dict[str, float]:
    await fn()  # warm
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - began) * 1000)
    samples.sort()
    return {
        "p50_ms": round(statistics.median(samples), 3),
        "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 3),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with scratch_store(args.pg_url, "fleet") as store:
        await _fill(store, args.workers, args.queues, args.backlog)
        listed = await store.list_workers(NS, None, include_dead=True)
        assert len(listed) == args.workers
        queue = await store.describe_task_queue(NS, "q0")
        assert queue.backlog[0].queued == args.backlog
        return {
            "store": "postgres" if args.pg_url else "sqlite",
            "workers": args.workers,
            "backlog": args.backlog,
            "list_workers": await _time(
                lambda: store.list_workers(NS, None, include_dead=True), args.repeat
            ),
            "list_workers_one_queue": await _time(
                lambda: store.list_workers(NS, "q1", include_dead=False), args.repeat
            ),
            "describe_task_queue": await _time(
                lambda: store.describe_task_queue(NS, "q0"), args.repeat
            ),
            "describe_run": await _time(lambda: store.describe(NS, "wf-0", None), args.repeat),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default=None, help="A PostgreSQL server (else SQLite).")
    parser.add_argument("--workers", type=int, default=2000)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--backlog", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(run(args))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>24}: {value}")


if __name__ == "__main__":
    main()
