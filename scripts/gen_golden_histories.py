"""Regenerate tests/fixtures/histories: run each golden workflow on an in-process
time-skipping server and export its history, as protobuf JSON (what ``durable-rpc workflow
history --export`` writes; pytest replays it) and as the serialized ``.pb`` (the cargo
test reads it with prost, no JSON mapping needed).

    python scripts/gen_golden_histories.py [NAME ...]   # default: all of them

The workflows live in tests/testing/golden_workflows.py; regenerate after changing them
and update the expectations in rust_core/tests/golden_histories.rs.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from google.protobuf import json_format

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from durable_rpc import Worker, WorkflowHandle  # noqa: E402
from durable_rpc.testing import WorkflowEnvironment  # noqa: E402
from durable_rpc.v1 import history_pb2  # noqa: E402
from tests.testing.golden_workflows import (  # noqa: E402
    ACTIVITIES,
    WORKFLOWS,
    GoldenHello,
    GoldenMarkers,
    GoldenSignal,
    GoldenTimer,
)

OUT = ROOT / "tests" / "fixtures" / "histories"
QUEUE = "golden"


async def _export(handle: WorkflowHandle, name: str) -> None:
    await handle.result(timeout=30)
    history = history_pb2.History(events=await handle.history())
    (OUT / f"{name}.json").write_text(json_format.MessageToJson(history) + "\n")
    (OUT / f"{name}.pb").write_bytes(history.SerializeToString())
    print(f"wrote {name}: {len(history.events)} events")


async def main() -> None:
    only = set(sys.argv[1:])

    def wanted(name: str) -> bool:
        return not only or name in only

    OUT.mkdir(parents=True, exist_ok=True)
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue=QUEUE, workflows=WORKFLOWS, activities=ACTIVITIES),
    ):
        client = env.client
        if wanted("hello_world"):
            hello = await client.start_workflow(
                GoldenHello.run, "World", id="golden-hello", task_queue=QUEUE
            )
            await _export(hello, "hello_world")

        if wanted("markers"):
            markers = await client.start_workflow(
                GoldenMarkers.run, "ada", id="golden-markers", task_queue=QUEUE
            )
            await _export(markers, "markers")

        if wanted("timer"):
            timer = await client.start_workflow(
                GoldenTimer.run, 24.0, id="golden-timer", task_queue=QUEUE
            )
            await _export(timer, "timer")

        if wanted("signal"):
            signal = await client.start_workflow(
                GoldenSignal.run, id="golden-signal", task_queue=QUEUE
            )
            # Signal once the first workflow task completed, so the signal is its own input.
            for _ in range(1000):
                if len(await signal.history()) >= 2:
                    break
                await asyncio.sleep(0.01)
            await signal.signal(GoldenSignal.approve, "alice")
            await _export(signal, "signal")


if __name__ == "__main__":
    asyncio.run(main())
