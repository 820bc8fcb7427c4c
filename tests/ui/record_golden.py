"""Record the golden histories of the UI's timeline tests from a real server and worker
(an in-process time-skipping server over a real socket, so retries and timers take no
wall time), as serialized protobuf (``<name>.pb``: what the tests read) and protobuf JSON
(``<name>.json``: for people) under tests/ui/golden/:

    python -m tests.ui.record_golden [NAME ...]     # default: all of them

- ``checkout``: two activities, the first failing its first attempt and then succeeding;
- ``fulfil``: a signal, a timer, a child workflow and a local activity whose first
  attempt fails;
- ``cancelled``: a run cancelled while it waits on a timer and an activity;
- ``failed``: an activity that fails for good, failing the run (with its stack trace);
- ``stuck``: an open run whose activity waits on a task queue no worker polls.

Recording gives new run ids and times: regenerate the golden SVGs after it
(``DURABLE_RPC_REGEN_GOLDEN=1 pytest tests/ui/test_timeline.py``) and check the drawings.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from google.protobuf import json_format

from durable_rpc import RetryPolicy, Worker, WorkflowHandle, activity, workflow
from durable_rpc.activity import ApplicationError
from durable_rpc.testing import WorkflowEnvironment
from durable_rpc.v1 import history_pb2

GOLDEN = Path(__file__).resolve().parent / "golden"
QUEUE = "ui-golden"
_attempts: dict[str, int] = {}


def _attempt(key: str) -> int:
    _attempts[key] = _attempts.get(key, 0) + 1
    return _attempts[key]


@activity.defn
async def charge(order: str) -> str:
    if _attempt(f"charge:{order}") == 1:
        raise RuntimeError("card network timeout, will be retried")
    return f"charged {order}"


@activity.defn
async def ship(order: str) -> dict[str, object]:
    return {"order": order, "carrier": "post", "weight_g": 1250, "label": b"%PDF-1.7\x00\x01"}


@activity.defn
async def refund(order: str) -> str:
    raise ApplicationError(f"order {order} was never charged", type="RefundRefused")


@activity.defn
async def never_served(order: str) -> str:
    return order  # pragma: no cover: nothing polls its queue


@activity.defn
def reserve_stock(order: str) -> int:
    if _attempt(f"stock:{order}") == 1:
        raise ValueError("stock service busy")
    return 3


@workflow.defn(name="Checkout")
class Checkout:
    @workflow.run
    async def run(self, order: str) -> dict[str, object]:
        charged = await workflow.execute_activity(
            charge,
            order,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=2)),
        )
        shipped = await workflow.execute_activity(
            ship, order, start_to_close_timeout=timedelta(seconds=10)
        )
        return {"charged": charged, "shipped": shipped}


@workflow.defn(name="Fulfil")
class Fulfil:
    def __init__(self) -> None:
        self.approved_by: str | None = None

    @workflow.signal
    def approve(self, by: str) -> None:
        self.approved_by = by

    @workflow.run
    async def run(self, order: str) -> str:
        await workflow.wait_condition(lambda: self.approved_by is not None)
        await workflow.sleep(timedelta(minutes=5))
        stock = await workflow.execute_local_activity(
            reserve_stock,
            order,
            start_to_close_timeout=timedelta(seconds=5),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=10)),
        )
        child = await workflow.execute_child_workflow(Checkout.run, order, id=f"{order}-checkout")
        return f"{self.approved_by} approved; {stock} reserved; {child['charged']}"


@workflow.defn(name="LongWait")
class LongWait:
    @workflow.run
    async def run(self, order: str) -> None:
        await asyncio.gather(
            workflow.sleep(timedelta(hours=1)),
            workflow.execute_activity(
                never_served,
                order,
                task_queue="nobody-polls",
                start_to_close_timeout=timedelta(seconds=10),
            ),
        )


@workflow.defn(name="Refund")
class Refund:
    @workflow.run
    async def run(self, order: str) -> str:
        return await workflow.execute_activity(
            refund,
            order,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=1),
        )


@workflow.defn(name="Stuck")
class Stuck:
    @workflow.run
    async def run(self, order: str) -> str:
        return await workflow.execute_activity(
            never_served,
            order,
            task_queue="nobody-polls",
            start_to_close_timeout=timedelta(seconds=10),
        )


def _write(name: str, events: list[history_pb2.HistoryEvent]) -> None:
    history = history_pb2.History(events=events)
    (GOLDEN / f"{name}.pb").write_bytes(history.SerializeToString())
    (GOLDEN / f"{name}.json").write_text(json_format.MessageToJson(history) + "\n")
    print(f"wrote {name}: {len(events)} events")


async def _until(
    handle: WorkflowHandle, done: Callable[[list[history_pb2.HistoryEvent]], bool]
) -> None:
    for _ in range(3000):
        if done(await handle.history()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{handle.workflow_id}: the history never got there")


def _has(kind: str) -> Callable[[list[history_pb2.HistoryEvent]], bool]:
    return lambda events: any(e.WhichOneof("attributes") == kind for e in events)


async def _closed(handle: WorkflowHandle) -> list[history_pb2.HistoryEvent]:
    # A failed or cancelled run is what some recordings want.
    with contextlib.suppress(Exception):
        await handle.result(timeout=30)
    return await handle.history()


async def _checkout(env: WorkflowEnvironment) -> list[history_pb2.HistoryEvent]:
    return await _closed(
        await env.client.start_workflow(Checkout.run, "o-1", id="checkout-o-1", task_queue=QUEUE)
    )


async def _fulfil(env: WorkflowEnvironment) -> list[history_pb2.HistoryEvent]:
    handle = await env.client.start_workflow(Fulfil.run, "o-2", id="fulfil-o-2", task_queue=QUEUE)
    await _until(handle, _has("workflow_task_completed"))
    await handle.signal(Fulfil.approve, "alice")
    return await _closed(handle)


async def _cancelled(env: WorkflowEnvironment) -> list[history_pb2.HistoryEvent]:
    handle = await env.client.start_workflow(LongWait.run, "o-3", id="wait-o-3", task_queue=QUEUE)
    await _until(handle, _has("timer_started"))
    await handle.cancel("customer changed their mind")
    return await _closed(handle)


async def _failed(env: WorkflowEnvironment) -> list[history_pb2.HistoryEvent]:
    return await _closed(
        await env.client.start_workflow(Refund.run, "o-4", id="refund-o-4", task_queue=QUEUE)
    )


async def _stuck(env: WorkflowEnvironment) -> list[history_pb2.HistoryEvent]:
    handle = await env.client.start_workflow(Stuck.run, "o-5", id="stuck-o-5", task_queue=QUEUE)
    await _until(handle, _has("activity_scheduled"))
    return await handle.history()


RECORDINGS: dict[
    str, Callable[[WorkflowEnvironment], Awaitable[list[history_pb2.HistoryEvent]]]
] = {
    "checkout": _checkout,
    "fulfil": _fulfil,
    "cancelled": _cancelled,
    "failed": _failed,
    "stuck": _stuck,
}


async def main(names: list[str]) -> None:
    unknown = sorted(set(names) - set(RECORDINGS))
    if unknown:
        raise SystemExit(f"unknown recordings {unknown}; known: {sorted(RECORDINGS)}")
    GOLDEN.mkdir(parents=True, exist_ok=True)
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(
            env.client,
            task_queue=QUEUE,
            workflows=[Checkout, Fulfil, LongWait, Refund, Stuck],
            activities=[charge, ship, refund, reserve_stock],
        ),
    ):
        for name, record in RECORDINGS.items():
            if not names or name in names:
                _write(name, await record(env))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
