"""How long a buffered schedule start waits after the run it waited for closed.

Starts an in-process server (``WorkflowEnvironment.start_local``: SQLite in memory, the
real clock), and ``--reps`` times: creates a BUFFER_ONE schedule (hourly, so no due slot
wakes the loop), triggers it twice (one run started, one due time buffered behind it),
terminates the first run and measures until the buffered due time's run has started.
Prints the milliseconds of each repetition and their median (JSON with ``--json``).

    python bench/schedule_buffer_latency.py
    python bench/schedule_buffer_latency.py --reps 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from datetime import timedelta

from durable_rpc import Client, ScheduleOverlap, ScheduleSpec
from durable_rpc.testing import WorkflowEnvironment


async def _started(client: Client, schedule_id: str) -> int:
    info = await client.describe_schedule(schedule_id)
    return [a.action for a in info.recent_actions].count("started")


async def _one(client: Client, schedule_id: str) -> float:
    await client.create_schedule(
        schedule_id,
        "Ticker",
        spec=ScheduleSpec(interval=timedelta(hours=1)),
        task_queue="q",
        overlap=ScheduleOverlap.BUFFER_ONE,
    )
    assert await client.trigger_schedule(schedule_id) == "started"
    await asyncio.sleep(0.01)  # the second trigger is another due time (ms resolution)
    assert await client.trigger_schedule(schedule_id) == "buffered"
    info = await client.describe_schedule(schedule_id)
    first = next(a for a in info.recent_actions if a.action == "started")
    await asyncio.sleep(0.2)  # the loop's pass after the trigger has run
    began = time.monotonic()
    await client.get_handle(first.workflow_id).terminate("bench")
    # Polled from outside, as a client sees it (2 ms granularity, a describe each).
    while True:
        if await _started(client, schedule_id) >= 2:
            return (time.monotonic() - began) * 1000
        await asyncio.sleep(0.002)


async def _main(reps: int) -> list[float]:
    async with await WorkflowEnvironment.start_local() as env:
        return [await _one(env.client, f"lat-{i}") for i in range(reps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    ms = asyncio.run(_main(args.reps))
    figures = {
        "benchmark": "schedule_buffer_latency",
        "close_to_buffered_start_ms": [round(x, 1) for x in ms],
        "median_ms": round(statistics.median(ms), 1),
    }
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"close -> buffered start, ms: {figures['close_to_buffered_start_ms']}")
        print(f"median: {figures['median_ms']} ms")


if __name__ == "__main__":
    main()
