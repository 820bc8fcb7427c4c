"""The workflows behind tests/fixtures/histories: the golden histories were recorded from
these exact classes (scripts/gen_golden_histories.py), so replaying them must pass. Change
them only together with the fixtures (and rust_core/tests/golden_histories.rs)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durable_rpc import RetryPolicy, activity, workflow

_attempts: dict[str, int] = {}


@activity.defn
async def say_hello(name: str) -> str:
    return f"Hello, {name}!"


@activity.defn
async def say_goodbye(name: str) -> str:
    # Fails its first attempt per name: the recorded history has a retried activity.
    _attempts[name] = _attempts.get(name, 0) + 1
    if _attempts[name] == 1:
        raise RuntimeError("transient failure, will be retried")
    return f"Goodbye, {name}!"


@workflow.defn(name="GoldenHello")
class GoldenHello:
    @workflow.run
    async def run(self, name: str) -> str:
        hello = await workflow.execute_activity(
            say_hello, name, start_to_close_timeout=timedelta(seconds=10)
        )
        goodbye = await workflow.execute_activity(
            say_goodbye,
            name,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=30)),
        )
        return f"{hello} {goodbye}"


@workflow.defn(name="GoldenTimer")
class GoldenTimer:
    @workflow.run
    async def run(self, hours: float) -> float:
        before = workflow.now()
        await workflow.sleep(timedelta(hours=hours))
        return (workflow.now() - before).total_seconds()


@workflow.defn(name="GoldenSignal")
class GoldenSignal:
    def __init__(self) -> None:
        self.approved_by: str | None = None
        self.arrived = asyncio.Event()

    @workflow.signal
    async def approve(self, who: str) -> None:
        self.approved_by = who
        self.arrived.set()

    @workflow.run
    async def run(self) -> str:
        await self.arrived.wait()
        greeting = await workflow.execute_activity(
            say_hello, str(self.approved_by), start_to_close_timeout=timedelta(seconds=10)
        )
        return f"approved: {greeting}"


@workflow.defn(name="GoldenMarkers")
class GoldenMarkers:
    """A side effect (seq 1), a patch marker (no seq), an activity (seq 2), a second
    side effect (seq 3) in the next task."""

    @workflow.run
    async def run(self, name: str) -> str:
        who = workflow.side_effect(lambda: name.upper(), result_type=str)
        if workflow.patched("polite"):
            greeting = await workflow.execute_activity(
                say_hello, who, start_to_close_timeout=timedelta(seconds=10)
            )
        else:
            greeting = f"hi {who}"
        count = workflow.side_effect(lambda: len(greeting), result_type=int)
        return f"{greeting} ({count})"


WORKFLOWS = [GoldenHello, GoldenTimer, GoldenSignal, GoldenMarkers]
ACTIVITIES = [say_hello, say_goodbye]
