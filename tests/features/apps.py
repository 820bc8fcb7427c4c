"""Workflows and activities for the feature tests, runnable as a worker process:

    python -m tests.features.apps ADDRESS TASK_QUEUE [--release]

Like tests/e2e/apps.py: activities append one line per execution to
$DURABLE_RPC_TEST_LOG; "blocking" activities wait forever unless --release was given.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from dataclasses import dataclass
from datetime import timedelta

from durable_rpc import (
    CancellationToken,
    Client,
    RetryPolicy,
    Worker,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
    activity,
    workflow,
)
from durable_rpc.client._payload_channel import DEFAULT_INLINE_THRESHOLD
from tests.e2e.apps import record
from tests.features.child_apps import Kid, Parent

RELEASED = False
_release = asyncio.Event()
SECOND = timedelta(seconds=1)


# --- signal-with-start ------------------------------------------------------------------


@workflow.defn(name="Cart")
class Cart:
    """Collects items; records what it saw before its main method ran."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.checked_out = False

    @workflow.signal
    def add(self, item: str) -> None:
        if item == "checkout":
            self.checked_out = True
        else:
            self.items.append(item)

    @workflow.run
    async def run(self, owner: str) -> dict[str, list[str]]:
        seen_at_start = list(self.items)
        await workflow.wait_condition(lambda: self.checked_out)
        return {"owner": [owner], "at_start": seen_at_start, "items": self.items}


# --- wait_condition with a timeout ------------------------------------------------------


@workflow.defn(name="Approval")
class Approval:
    def __init__(self) -> None:
        self.approved = False

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.run
    async def run(self, timeout_s: float) -> str:
        try:
            await workflow.wait_condition(lambda: self.approved, timeout=timeout_s)
        except TimeoutError:
            return "timed out"
        return "approved"


# --- saga -------------------------------------------------------------------------------


@activity.defn
async def book(what: str) -> str:
    record(f"book:{what}")
    if what == "car":
        raise activity.ApplicationError("no cars left", type="SoldOut", non_retryable=True)
    return f"booked:{what}"


@activity.defn
async def cancel_booking(what: str) -> None:
    record(f"undo-start:{what}")
    # The oldest compensation blocks: the test kills the worker here.
    if what == "flight" and not RELEASED:
        await _release.wait()
    record(f"undo-done:{what}")


@workflow.defn(name="Trip")
class Trip:
    @workflow.run
    async def run(self) -> str:
        try:
            async with workflow.Saga(
                start_to_close_timeout=timedelta(seconds=2),
                retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
            ) as saga:
                for what in ("flight", "hotel", "car"):
                    await workflow.execute_activity(
                        book, what, start_to_close_timeout=timedelta(seconds=5)
                    )
                    saga.add(cancel_booking, what)
        except workflow.ActivityError as exc:
            return f"compensated after {exc.cause}"
        return "booked"


@activity.defn
async def undo_may_fail(what: str) -> None:
    record(f"undo:{what}")
    if what == "b":
        raise activity.ApplicationError("cannot undo b", non_retryable=True)


@workflow.defn(name="LenientSaga")
class LenientSaga:
    @workflow.run
    async def run(self, continue_on_error: bool) -> list[str]:
        saga = workflow.Saga(continue_on_error=continue_on_error)
        for what in ("a", "b", "c"):
            saga.add(undo_may_fail, what)
        try:
            await saga.compensate()
        except workflow.CompensationError as exc:
            return [type(e).__name__ for e in exc.errors]
        return []


# --- activities: heartbeats, cancellation, retries, timeouts ------------------------------


@dataclass
class Progress:
    done: int
    note: str


@activity.defn
async def resumable(total: int) -> str:
    """Heartbeats its progress; attempt 1 fails half way, attempt 2 resumes from there."""
    info = activity.info()
    (start,) = activity.heartbeat_details(Progress) or (Progress(0, "fresh"),)
    record(f"resumable attempt={info.attempt} from={start.done} note={start.note}")
    for i in range(start.done, total):
        activity.heartbeat(Progress(i + 1, f"after-{i + 1}"))
        if info.attempt == 1 and i + 1 == total // 2:
            raise RuntimeError("crash half way")
    return f"finished from {start.done}"


@activity.defn
def hangs_once() -> str:
    """Attempt 1 heartbeats once then hangs without heartbeating: the heartbeat timeout
    must end it. Sync, so the hang is a real blocked thread."""
    attempt = activity.info().attempt
    record(f"hangs_once attempt={attempt}")
    if attempt == 1:
        activity.heartbeat("started")
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not activity.is_cancelled():
            time.sleep(0.05)
        return "hung"
    return f"ok on attempt {attempt}"


@activity.defn
async def wait_for_cancel() -> str:
    record("wait_for_cancel started")
    try:
        while True:
            activity.heartbeat("waiting")
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        record("wait_for_cancel cancelled")
        raise


@activity.defn
async def cleanup(tag: str) -> str:
    record(f"cleanup:{tag}")
    return tag


@activity.defn
async def flaky(kind: str) -> str:
    attempt = activity.info().attempt
    record(f"flaky:{kind} attempt={attempt}")
    if kind == "non-retryable-app":
        raise activity.ApplicationError("stop", type="Fatal", non_retryable=True)
    if kind == "value-error":
        raise ValueError("bad value")
    raise RuntimeError(f"attempt {attempt} failed")


@workflow.defn(name="Heartbeats")
class Heartbeats:
    @workflow.run
    async def run(self, which: str) -> str:
        fast_retry = RetryPolicy(initial_interval=timedelta(milliseconds=50))
        if which == "resume":
            return await workflow.execute_activity(
                resumable, 10, start_to_close_timeout=10 * SECOND, retry_policy=fast_retry
            )
        return await workflow.execute_activity(
            hangs_once,
            start_to_close_timeout=30 * SECOND,
            heartbeat_timeout=SECOND,
            retry_policy=fast_retry,
        )


@workflow.defn(name="Cancellable")
class Cancellable:
    @workflow.run
    async def run(self) -> str:
        try:
            return await workflow.execute_activity(
                wait_for_cancel, start_to_close_timeout=60 * SECOND, heartbeat_timeout=2 * SECOND
            )
        except asyncio.CancelledError:
            await workflow.execute_activity(
                cleanup, "after-cancel", start_to_close_timeout=5 * SECOND
            )
            raise


@workflow.defn(name="Retries")
class Retries:
    @workflow.run
    async def run(self, kind: str) -> str:
        policy = RetryPolicy(
            initial_interval=timedelta(milliseconds=50),
            backoff_coefficient=10.0,
            maximum_interval=timedelta(milliseconds=200),
            maximum_attempts=4,
            non_retryable_error_types=["ValueError"],
        )
        try:
            await workflow.execute_activity(
                flaky, kind, start_to_close_timeout=5 * SECOND, retry_policy=policy
            )
        except workflow.ActivityError as exc:
            cause = exc.cause
            return f"{exc.attempt}:{getattr(cause, 'type', '')}"
        return "ok"


@workflow.defn(name="Deadlines")
class Deadlines:
    @workflow.run
    async def run(self, which: str) -> str:
        try:
            if which == "schedule_to_start":
                # Scheduled on a queue no worker polls.
                await workflow.execute_activity(
                    cleanup,
                    "never",
                    task_queue="nobody-polls-this",
                    start_to_close_timeout=5 * SECOND,
                    schedule_to_start_timeout=timedelta(milliseconds=500),
                )
            else:
                # Never completes: the schedule_to_close deadline ends it.
                await workflow.execute_activity(
                    wait_for_cancel, schedule_to_close_timeout=timedelta(milliseconds=1500)
                )
        except workflow.ActivityError as exc:
            return f"{getattr(exc.cause, 'type', '')}"
        return "ok"


@workflow.defn(name="Tagged")
class Tagged:
    """Upserts search attributes after a signal; returns what info() showed."""

    def __init__(self) -> None:
        self.stage = ""

    @workflow.signal
    def advance(self, stage: str) -> None:
        self.stage = stage

    @workflow.run
    async def run(self) -> dict[str, object]:
        before = dict(workflow.info().search_attributes)
        await workflow.wait_condition(lambda: bool(self.stage))
        workflow.upsert_search_attributes({"Stage": self.stage, "Amount": 250})
        await workflow.wait_condition(lambda: self.stage == "done")
        info = workflow.info()
        return {
            "memo": info.memo,
            "before": sorted(before),
            "after": {k: str(v) for k, v in sorted(info.search_attributes.items())},
        }


# --- queries ------------------------------------------------------------------------------


@dataclass
class Tally:
    phase: str
    items: list[str]


@workflow.defn(name="Counter")
class Counter:
    """Collects items while it sleeps and then waits for "finish"; queryable throughout."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.phase = "created"
        self.finished = False

    @workflow.signal
    def add(self, item: str) -> None:
        self.items.append(item)

    @workflow.signal
    def finish(self) -> None:
        self.finished = True

    @workflow.query
    def count(self) -> int:
        return len(self.items)

    @workflow.query(name="items_from")
    def items_from_index(self, start: int, upper: bool) -> list[str]:
        return [i.upper() if upper else i for i in self.items[start:]]

    @workflow.query
    def tally(self) -> Tally:
        return Tally(self.phase, list(self.items))

    @workflow.query
    def broken(self) -> int:
        raise ValueError("this query is broken")

    @workflow.query
    def wall_clock(self) -> float:
        return time.time()  # a mistake: refused in workflow code, queries included

    @workflow.run
    async def run(self, nap_s: float) -> int:
        self.phase = "sleeping"
        await workflow.sleep(nap_s)
        self.phase = "waiting"
        await workflow.wait_condition(lambda: self.finished)
        self.phase = "done"
        return len(self.items)


# --- continue-as-new ----------------------------------------------------------------------


@workflow.defn(name="Looper")
class Looper:
    """Runs one leg per run: sleeps, upserts the leg number, then continues as new until
    ``legs`` runs have passed; the last run returns what it saw of the chain."""

    @workflow.run
    async def run(self, leg: int, legs: int, seen: list[str]) -> dict[str, object]:
        info = workflow.info()
        seen = [*seen, info.continued_from_run_id]
        await workflow.sleep(0.05)
        workflow.upsert_search_attributes({"Amount": leg})
        if leg < legs:
            workflow.continue_as_new(leg + 1, legs, seen)
        return {
            "leg": leg,
            "from": seen,
            "memo": info.memo,
            "attrs": {k: str(v) for k, v in sorted(workflow.info().search_attributes.items())},
        }


# --- updates ------------------------------------------------------------------------------


@activity.defn
async def slow_charge(amount: int) -> str:
    """Blocks (until --release) so a test can kill the worker mid-update."""
    record(f"charge-start:{amount}")
    if not RELEASED:
        await _release.wait()
    record(f"charge-done:{amount}")
    return f"charged:{amount}"


@dataclass
class Receipt:
    balance: int
    note: str


@workflow.defn(name="Ledger")
class Ledger:
    """A balance changed by updates; runs until the ``close`` signal."""

    def __init__(self) -> None:
        self.balance = 0
        self.deposits = 0
        self.closed = False

    @workflow.update
    def deposit(self, amount: int, note: str) -> Receipt:
        self.balance += amount
        self.deposits += 1
        return Receipt(self.balance, note)

    @deposit.validator
    def check_deposit(self, amount: int, note: str) -> None:
        if amount <= 0:
            raise ValueError(f"amount must be positive, got {amount}")

    @workflow.update
    async def charge(self, amount: int) -> Receipt:
        note = await workflow.execute_activity(
            slow_charge,
            amount,
            start_to_close_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
        )
        self.balance -= amount
        return Receipt(self.balance, note)

    @workflow.update
    async def refuse(self) -> int:
        await workflow.sleep(0.01)
        raise activity.ApplicationError("refused on purpose", type="Refused")

    @workflow.query
    def count(self) -> int:
        return self.deposits

    @workflow.signal
    def close(self) -> None:
        self.closed = True

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.closed)
        return self.balance


# --- the history budget ------------------------------------------------------------------


@workflow.defn(name="Budget")
class Budget:
    """Takes chunks by signal until "stop", then reports what workflow.info() said of its
    history; with ``bloat`` > 0 it first schedules an activity with that big an input
    (its own command passing the history limit)."""

    def __init__(self) -> None:
        self.chunks = 0
        self.stopped = False

    @workflow.signal
    def chunk(self, data: str) -> None:
        if data == "stop":
            self.stopped = True
        else:
            self.chunks += 1

    @workflow.run
    async def run(self, bloat: int) -> dict[str, int | bool]:
        if bloat:
            await workflow.execute_activity(
                book, "x" * bloat, start_to_close_timeout=timedelta(seconds=10)
            )
        await workflow.wait_condition(lambda: self.stopped)
        info = workflow.info()
        return {
            "chunks": self.chunks,
            "history_length": info.history_length,
            "history_size_bytes": info.history_size_bytes,
            "continue_as_new_suggested": info.continue_as_new_suggested,
        }


WORKFLOWS = [
    Kid,
    Parent,
    Counter,
    Cart,
    Approval,
    Trip,
    LenientSaga,
    Heartbeats,
    Cancellable,
    Retries,
    Deadlines,
    Tagged,
    Looper,
    Ledger,
    Budget,
]
ACTIVITIES = [
    book,
    cancel_booking,
    undo_may_fail,
    resumable,
    hangs_once,
    wait_for_cancel,
    cleanup,
    flaky,
    slow_charge,
]


async def main() -> None:
    global RELEASED
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    parser.add_argument("--release", action="store_true")
    parser.add_argument(
        "--inline-threshold",
        type=int,
        default=DEFAULT_INLINE_THRESHOLD,
        help="payload frames over this many bytes go by reference",
    )
    args = parser.parse_args()
    RELEASED = args.release
    client = await Client.connect(args.address, payload_inline_threshold=args.inline_threshold)
    worker = Worker(client, task_queue=args.task_queue, workflows=WORKFLOWS, activities=ACTIVITIES)
    token = CancellationToken()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, token.cancel)
    config = WorkflowSupervisorConfig(8).with_backoff(
        timedelta(milliseconds=50), timedelta(seconds=1)
    )
    print(await WorkflowSupervisor(worker, config).run(token), flush=True)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
