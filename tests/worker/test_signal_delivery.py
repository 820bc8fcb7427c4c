"""Signal delivery at volume: what a delivery costs does not grow with per-signal
reflection, and plain and async handlers keep the order they were delivered in."""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Callable
from typing import Any

import pytest

from durable_rpc import workflow
from tests.worker.activations import activation, instance, kinds, result_of, signal, start


@workflow.defn(name="ManySignals")
class ManySignals:
    def __init__(self) -> None:
        self.total = 0

    @workflow.signal
    def add(self, amount: int) -> None:
        self.total += amount

    @workflow.run
    async def run(self, target: int) -> int:
        await workflow.wait_condition(lambda: self.total >= target)
        return self.total


def test_delivering_signals_reads_no_type_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reading a handler's hints per delivery cost ~30 us a signal: 300 ms of a 10,000-signal
    # cold replay. They are read once, when the definition or handler is registered.
    wf = instance(ManySignals)
    wf.activate(activation(start(ManySignals, 500)))
    reads: list[object] = []
    real: Callable[..., Any] = typing.get_type_hints

    def counted(obj: object, *args: Any, **kwargs: Any) -> Any:
        reads.append(obj)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(typing, "get_type_hints", counted)
    done = wf.activate(activation(*(signal("add", 1) for _ in range(500))))
    assert result_of(done.commands[0]) == 500
    assert reads == []


def test_plain_and_async_handlers_run_in_delivery_order() -> None:
    @workflow.defn(name="MixedHandlers")
    class Mixed:
        def __init__(self) -> None:
            self.log: list[str] = []

        @workflow.signal
        def plain(self, tag: str) -> None:
            self.log.append(f"plain:{tag}")

        @workflow.signal
        async def slow(self, tag: str) -> None:
            self.log.append(f"slow:{tag}:before")
            await asyncio.sleep(0)
            self.log.append(f"slow:{tag}:after")

        @workflow.run
        async def run(self) -> list[str]:
            self.log.append("main")
            await workflow.wait_condition(lambda: len(self.log) >= 5)
            return self.log

    wf = instance(Mixed)
    done = wf.activate(
        activation(start(Mixed), signal("plain", "1"), signal("slow", "2"), signal("plain", "3"))
    )
    # Each handler starts where it was queued (after the jobs, before main's first step);
    # the async one resumes after everything queued before its sleep.
    assert result_of(done.commands[0]) == [
        "plain:1",
        "slow:2:before",
        "plain:3",
        "main",
        "slow:2:after",
    ]


def test_a_failing_plain_handler_fails_the_run_and_later_handlers_still_run() -> None:
    @workflow.defn(name="FailingHandler")
    class Failing:
        def __init__(self) -> None:
            self.seen: list[int] = []

        @workflow.signal
        def check(self, n: int) -> None:
            self.seen.append(n)
            if n == 2:
                raise ValueError(f"bad signal {n}")

        @workflow.run
        async def run(self) -> None:
            await workflow.wait_condition(lambda: False)

    wf = instance(Failing)
    done = wf.activate(activation(start(Failing), signal("check", 1), signal("check", 2)))
    assert kinds(done.commands) == ["fail_workflow"]
    assert done.commands[0].fail_workflow.failure.message == "bad signal 2"
