"""How long one retention transaction takes, and what it does to the hot path's writes.

Fills a store with closed runs (each with ``--events`` history events: start, signals,
termination; a search attribute; its tasks and signal records), sets the namespace's
retention to 1 ms and deletes them batch by batch with ``delete_expired_runs`` (the
server's retention loop does the same, pausing between batches as long as the last one
took). Meanwhile one writer signals an open run in a loop, as the hot path would: the
figures are each batch's duration and that writer's latency during the sweep against
its latency before it (same process, same window).

    python bench/retention_batch.py                       # SQLite file in a temp dir
    python bench/retention_batch.py --pg-url postgresql://postgres@127.0.0.1:56101/postgres
    python bench/retention_batch.py --batch 200 --runs 3000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid

from _scratch import scratch_store

from durable_rpc.server._retention import DEFAULT_MAX_EVENTS, JOB, MIN_PAUSE_S
from durable_rpc.store import StartOptions, Store
from durable_rpc.v1 import payload_pb2, search_attributes_pb2

NS = "default"


def _payload(data: bytes) -> bytes:
    return payload_pb2.Payload(data=data).SerializeToString()


async def _fill(store: Store, runs: int, events: int) -> None:
    attrs = search_attributes_pb2.SearchAttributes()
    attrs.indexed_fields["Customer"].type = "keyword"
    attrs.indexed_fields["Customer"].string_value = "c-1"
    options = StartOptions(search_attributes=attrs.SerializeToString())

    async def one(i: int) -> None:
        wid = f"wf-{i}"
        await store.start_workflow(
            NS, wid, "Order", "1", "q", _payload(b"x" * 200), wid, options=options
        )
        for s in range(max(0, events - 3)):
            await store.signal_workflow(NS, wid, None, "s", _payload(b"y" * 200), f"{wid}-{s}")
        await store.terminate(NS, wid, None, "bench")

    for start in range(0, runs, 50):  # 50 at a time: group commit fills faster
        await asyncio.gather(*(one(i) for i in range(start, min(runs, start + 50))))


async def _writer(store: Store, stop: asyncio.Event, latencies: list[float]) -> None:
    i = 0
    while not stop.is_set():
        began = time.perf_counter()
        await store.signal_workflow(NS, "hot", None, "s", _payload(b"z"), f"hot-{uuid.uuid4().hex}")
        latencies.append((time.perf_counter() - began) * 1000)
        i += 1
        await asyncio.sleep(0.002)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def run(
    pg_url: str | None, runs: int, events: int, batch: int, max_events: int
) -> dict[str, object]:
    async with scratch_store(pg_url, "retention") as store:
        await _fill(store, runs, events)
        await store.start_workflow(NS, "hot", "Order", "1", "q", _payload(b"h"), "hot")
        await store.update_namespace(NS, None, 1)
        await asyncio.sleep(0.01)

        stop = asyncio.Event()
        idle: list[float] = []
        writer = asyncio.create_task(_writer(store, stop, idle))
        await asyncio.sleep(1.0)
        stop.set()
        await writer

        owner = "bench"
        assert await store.take_maintenance_lease(JOB, owner, 600_000)
        stop = asyncio.Event()
        during: list[float] = []
        writer = asyncio.create_task(_writer(store, stop, during))
        durations: list[float] = []
        deleted = 0
        began_sweep = time.perf_counter()
        while True:
            began = time.perf_counter()
            result = await store.delete_expired_runs(owner, batch, max_events)
            took = time.perf_counter() - began
            durations.append(took * 1000)
            deleted += result.deleted
            if not result.more:
                break
            await asyncio.sleep(max(MIN_PAUSE_S, took))  # as the server's loop does
        sweep_s = time.perf_counter() - began_sweep
        stop.set()
        await writer
        assert deleted == runs, (deleted, runs)
        return {
            "store": "postgres" if pg_url else "sqlite",
            "runs": runs,
            "events_per_run": events,
            "batch": batch,
            "max_events": max_events,
            "batches": len(durations),
            "batch_ms_p50": round(statistics.median(durations), 1),
            "batch_ms_max": round(max(durations), 1),
            "runs_deleted_per_s": round(deleted / sweep_s),
            "writer_ms_p50_idle": round(_pct(idle, 0.5), 2),
            "writer_ms_p99_idle": round(_pct(idle, 0.99), 2),
            "writer_ms_max_idle": round(max(idle), 2),
            "writer_ms_p50_sweep": round(_pct(during, 0.5), 2),
            "writer_ms_p99_sweep": round(_pct(during, 0.99), 2),
            "writer_ms_max_sweep": round(max(during), 2),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pg-url", default=None, help="a PostgreSQL server (a fresh database is made)"
    )
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--events", type=int, default=10, help="history events per run")
    parser.add_argument("--batch", type=int, default=100, help="runs per transaction")
    parser.add_argument(
        "--max-events", type=int, default=DEFAULT_MAX_EVENTS, help="history events per transaction"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = asyncio.run(run(args.pg_url, args.runs, args.events, args.batch, args.max_events))
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key:>22}: {value}")


if __name__ == "__main__":
    main()
