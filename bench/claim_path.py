"""What the claim path costs in the store, without gRPC: the hello workload's store
operations in one process (start, claim the workflow task, schedule one activity, claim
it, complete it, claim and complete the closing workflow task), one run at a time.

Nothing here sets a priority or a fairness key (the cost of the claim order with
nothing set: docs/engine.md, "Priority and fairness"), so the same script measures an
older checkout (run it from that checkout: ``_checkout``) for an A/B comparison.

    python bench/claim_path.py [--store sqlite|sqlite-memory|postgres] [--pg-url URL] [--runs 300]
        [--reps 3] [--json]

Prints the median over ``--reps`` of the microseconds per run (wall) and of this
process's CPU per run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _checkout  # noqa: F401  (measure this checkout's package)
from _proc import cpu_s
from bench_stores import database

from durable_rpc.store import Store, open_store
from durable_rpc.v1 import options_pb2, payload_pb2, workflow_task_pb2

NS, QUEUE = "default", "bench"


def _payload(data: bytes) -> bytes:
    return payload_pb2.Payload(data=data).SerializeToString()


def _schedule(seq: int) -> workflow_task_pb2.Command:
    options = options_pb2.ActivityOptions()
    options.start_to_close_timeout.FromMilliseconds(30_000)
    return workflow_task_pb2.Command(
        seq=seq,
        schedule_activity=workflow_task_pb2.ScheduleActivity(
            activity_type="say_hello", input=payload_pb2.Payload(data=b"in"), options=options
        ),
    )


def _complete(seq: int) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(
            result=payload_pb2.Payload(data=b"done")
        ),
    )


async def _one_run(store: Store, i: int) -> None:
    await store.start_workflow(NS, f"hello-{i}", "Hello", "1", QUEUE, _payload(b"a"), f"r-{i}")
    task = await store.claim_workflow_task(NS, QUEUE, "w1", 30_000)
    assert task is not None and task.workflow_id == f"hello-{i}"
    await store.complete_workflow_task(NS, task.lease, len(task.events), [_schedule(1)])
    activity = await store.claim_activity_task(NS, QUEUE, "w1", ["say_hello"])
    assert activity is not None
    done = await store.complete_activity_task_inline(NS, activity.lease, _payload(b"r"))
    assert done is not None
    task = await store.claim_workflow_task(NS, QUEUE, "w1", 30_000)
    assert task is not None
    await store.complete_workflow_task(NS, task.lease, len(task.events) or 5, [_complete(2)])


async def _measure(url: str, runs: int) -> tuple[float, float]:
    store = open_store(url)
    await store.open()
    try:
        for i in range(20):  # warm-up
            await _one_run(store, -1 - i)
        cpu0, wall0 = cpu_s(os.getpid()), time.perf_counter()
        for i in range(runs):
            await _one_run(store, i)
        wall, cpu = time.perf_counter() - wall0, cpu_s(os.getpid()) - cpu0
    finally:
        await store.close()
    return wall / runs * 1e6, cpu / runs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--store",
        choices=["sqlite", "sqlite-memory", "postgres"],
        default="sqlite",
        help="sqlite-memory: no fsync, so the store's own work shows",
    )
    parser.add_argument("--pg-url", help="PostgreSQL cluster (default: a throwaway one)")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    walls, cpus = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            if args.store == "sqlite-memory":
                wall, cpu = asyncio.run(_measure("sqlite://:memory:", args.runs))
            else:
                with database(args.store, args.pg_url, f"{tmp}/{rep}") as url:
                    Path(f"{tmp}/{rep}").mkdir(exist_ok=True)
                    wall, cpu = asyncio.run(_measure(url, args.runs))
            walls.append(wall)
            cpus.append(cpu)
    result: dict[str, Any] = {
        "benchmark": "claim_path",
        "store": args.store,
        "runs": args.runs,
        "us_per_run_median": round(statistics.median(walls), 1),
        "cpu_us_per_run_median": round(statistics.median(cpus), 1),
        "us_per_run": [round(w, 1) for w in walls],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
