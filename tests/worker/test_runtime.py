"""The deterministic runtime, driven by hand-built activations (no replay machine)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import timedelta

import pytest

from durable_rpc import activity, workflow
from durable_rpc.v1 import workflow_task_pb2
from tests.worker.activations import (
    T0,
    activation,
    cancel,
    completed,
    failed,
    fire,
    instance,
    kinds,
    result_of,
    signal,
    start,
)

TIMEOUT = timedelta(seconds=10)


@dataclass
class Order:
    order_id: str
    cents: int


@dataclass
class Receipt:
    order_id: str
    charged: int


@activity.defn
async def charge(order: Order) -> Receipt:
    return Receipt(order.order_id, order.cents)


@activity.defn(name="greet")
def greet_sync(name: str) -> str:
    return f"hello {name}"


@workflow.defn
class OneActivity:
    @workflow.run
    async def run(self, order: Order) -> Receipt:
        return await workflow.execute_activity(charge, order, start_to_close_timeout=TIMEOUT)


def test_start_schedules_the_activity_then_resolution_completes() -> None:
    wf = instance(OneActivity)
    first = wf.activate(activation(start(OneActivity, Order("o-1", 250))))
    assert kinds(first.commands) == ["schedule_activity"]
    command = first.commands[0]
    assert command.seq == 1
    assert command.schedule_activity.activity_type == "charge"
    assert command.schedule_activity.options.start_to_close_timeout.seconds == 10
    assert not command.schedule_activity.options.non_idempotent

    second = wf.activate(activation(completed(1, Receipt("o-1", 250))))
    assert kinds(second.commands) == ["complete_workflow"]
    assert result_of(second.commands[0], Receipt) == Receipt("o-1", 250)


def test_typed_arguments_and_results_round_trip_as_dataclasses() -> None:
    seen: list[object] = []

    @workflow.defn(name="Typed")
    class Typed:
        @workflow.run
        async def run(self, order: Order) -> Receipt:
            seen.append(order)
            receipt = await workflow.execute_activity(charge, order, start_to_close_timeout=TIMEOUT)
            seen.append(receipt)
            return receipt

    wf = instance(Typed)
    wf.activate(activation(start(Typed, Order("o-2", 9))))
    wf.activate(activation(completed(1, {"order_id": "o-2", "charged": 9})))
    assert seen == [Order("o-2", 9), Receipt("o-2", 9)]


def test_gather_of_two_activities_gives_two_commands_in_seq_order() -> None:
    @workflow.defn
    class Fanout:
        @workflow.run
        async def run(self) -> list[str]:
            a, b = await asyncio.gather(
                workflow.execute_activity(greet_sync, "a", start_to_close_timeout=TIMEOUT),
                workflow.execute_activity("greet", "b", start_to_close_timeout=TIMEOUT),
            )
            return [a, b]

    wf = instance(Fanout)
    out = wf.activate(activation(start(Fanout)))
    assert [(c.seq, c.schedule_activity.activity_type) for c in out.commands] == [
        (1, "greet"),
        (2, "greet"),
    ]
    # Resolved out of order: the result still follows the code's order.
    assert wf.activate(activation(completed(2, "hello b"))).commands == []
    done = wf.activate(activation(completed(1, "hello a")))
    assert result_of(done.commands[0]) == ["hello a", "hello b"]


def test_timer_starts_and_fires() -> None:
    @workflow.defn
    class Sleeper:
        @workflow.run
        async def run(self) -> str:
            await workflow.sleep(timedelta(minutes=5))
            return workflow.now().isoformat()

    wf = instance(Sleeper)
    out = wf.activate(activation(start(Sleeper)))
    assert kinds(out.commands) == ["start_timer"]
    assert out.commands[0].start_timer.duration.seconds == 300
    later = T0 + timedelta(minutes=5)
    done = wf.activate(activation(fire(1), at=later))
    assert result_of(done.commands[0]) == later.isoformat()


def test_signal_handler_updates_state_and_wait_condition_wakes() -> None:
    @workflow.defn
    class Approval:
        def __init__(self) -> None:
            self.approvals: list[str] = []

        @workflow.signal(name="approve")
        def on_approve(self, who: str) -> None:
            self.approvals.append(who)

        @workflow.run
        async def run(self) -> list[str]:
            await workflow.wait_condition(lambda: len(self.approvals) >= 2)
            return self.approvals

    wf = instance(Approval)
    assert wf.activate(activation(start(Approval))).commands == []
    assert wf.activate(activation(signal("approve", "ann"))).commands == []
    done = wf.activate(activation(signal("approve", "bob")))
    assert result_of(done.commands[0]) == ["ann", "bob"]


def test_unknown_signal_is_buffered_until_a_handler_is_set() -> None:
    @workflow.defn
    class Late:
        @workflow.run
        async def run(self) -> list[int]:
            got: list[int] = []
            await workflow.sleep(1)
            workflow.set_signal_handler("late", got.append)
            await asyncio.sleep(0)  # let the buffered signal's handler run
            return got

    wf = instance(Late)
    wf.activate(activation(start(Late), signal("late", 7), signal("nobody", 1)))
    done = wf.activate(activation(fire(1)))
    # Buffered in arrival order, delivered once a handler exists; "nobody" stays buffered.
    assert result_of(done.commands[0]) == [7]


def test_cancellation_cancels_the_timer_and_ends_cancelled() -> None:
    cleaned: list[str] = []

    @workflow.defn
    class Cancellable:
        @workflow.run
        async def run(self) -> None:
            try:
                await workflow.sleep(3600)
            finally:
                cleaned.append("cleanup")

    wf = instance(Cancellable)
    wf.activate(activation(start(Cancellable)))
    out = wf.activate(activation(cancel("user asked")))
    assert kinds(out.commands) == ["cancel_timer", "cancel_workflow"]
    assert out.commands[0].cancel_timer.timer_seq == 1
    assert cleaned == ["cleanup"]


def test_cancellation_can_be_caught_to_run_a_compensation() -> None:
    @workflow.defn
    class Compensating:
        @workflow.run
        async def run(self) -> str:
            try:
                await workflow.sleep(3600)
            except asyncio.CancelledError:
                await workflow.execute_activity("refund", start_to_close_timeout=TIMEOUT)
                raise
            return "never"

    wf = instance(Compensating)
    wf.activate(activation(start(Compensating)))
    out = wf.activate(activation(cancel()))
    assert kinds(out.commands) == ["cancel_timer", "schedule_activity"]
    assert out.commands[1].seq == 2
    done = wf.activate(activation(completed(2, None)))
    assert kinds(done.commands) == ["cancel_workflow"]


def test_failing_workflow_produces_fail_workflow() -> None:
    @workflow.defn
    class Broken:
        @workflow.run
        async def run(self) -> None:
            raise ValueError("bad input")

    out = instance(Broken).activate(activation(start(Broken)))
    assert kinds(out.commands) == ["fail_workflow"]
    failure = out.commands[0].fail_workflow.failure
    assert (failure.type, failure.message) == ("ValueError", "bad input")
    assert "raise ValueError" in failure.stack_trace


def test_application_error_type_and_non_retryable_are_kept() -> None:
    @workflow.defn
    class Declined:
        @workflow.run
        async def run(self) -> None:
            raise workflow.ApplicationError("no funds", type="CardDeclined", non_retryable=True)

    failure = instance(Declined).activate(activation(start(Declined))).commands[0]
    assert failure.fail_workflow.failure.type == "CardDeclined"
    assert failure.fail_workflow.failure.non_retryable


def test_activity_failure_raises_activity_error_with_cause() -> None:
    caught: list[workflow.ActivityError] = []

    @workflow.defn
    class Handles:
        @workflow.run
        async def run(self) -> str:
            try:
                await workflow.execute_activity("pay", start_to_close_timeout=TIMEOUT)
            except workflow.ActivityError as err:
                caught.append(err)
                return "handled"
            return "paid"

    wf = instance(Handles)
    wf.activate(activation(start(Handles)))
    done = wf.activate(activation(failed(1, "CardDeclined", "no funds", attempt=3)))
    assert result_of(done.commands[0]) == "handled"
    (err,) = caught
    assert not isinstance(err, workflow.AmbiguousEffectError)
    assert (err.seq, err.attempt, err.activity_type) == (1, 3, "pay")
    assert isinstance(err.cause, workflow.ApplicationError)
    assert (err.cause.type, err.cause.message) == ("CardDeclined", "no funds")


def test_uncaught_activity_failure_fails_the_workflow_with_the_cause_chain() -> None:
    wf = instance(OneActivity)
    wf.activate(activation(start(OneActivity, Order("o", 1))))
    out = wf.activate(activation(failed(1, "ValueError", "boom")))
    failure = out.commands[0].fail_workflow.failure
    assert failure.type == "ActivityError"
    assert (failure.cause.type, failure.cause.message) == ("ValueError", "boom")


def test_ambiguous_outcome_raises_ambiguous_effect_error() -> None:
    caught: list[workflow.AmbiguousEffectError] = []

    @workflow.defn
    class Transfer:
        @workflow.run
        async def run(self) -> None:
            try:
                await workflow.execute_activity(
                    "wire", start_to_close_timeout=TIMEOUT, idempotent=False
                )
            except workflow.AmbiguousEffectError as err:
                caught.append(err)

    wf = instance(Transfer)
    first = wf.activate(activation(start(Transfer)))
    assert first.commands[0].schedule_activity.options.non_idempotent
    wf.activate(activation(failed(1, "AmbiguousEffectError", "lease expired", ambiguous=True)))
    (err,) = caught
    assert (err.seq, err.attempt, err.activity_type) == (1, 1, "wire")


def test_deterministic_helpers_repeat_on_replay() -> None:
    @workflow.defn
    class Helpers:
        @workflow.run
        async def run(self) -> list[str]:
            info = workflow.info()
            return [
                str(workflow.uuid4()),
                str(workflow.random().randint(0, 10**9)),
                workflow.now().isoformat(),
                info.workflow_id,
                info.task_queue,
                str(info.is_replaying),
            ]

    first = result_of(instance(Helpers).activate(activation(start(Helpers))).commands[0])
    again = instance(Helpers).activate(activation(start(Helpers), replaying=True))
    second = result_of(again.commands[0])
    assert first[:5] == second[:5]
    assert first[2] == T0.isoformat()
    assert first[3:] == ["wf-1", "tq", "False"]
    assert second[5] == "True"


def test_asyncio_sleep_fails_the_task_not_the_workflow() -> None:
    @workflow.defn
    class Naughty:
        @workflow.run
        async def run(self) -> None:
            # Swallowing the error does not help: the task still fails.
            with contextlib.suppress(Exception):
                await asyncio.sleep(1)

    with pytest.raises(workflow.WorkflowTaskError, match="not allowed in workflow code"):
        instance(Naughty).activate(activation(start(Naughty)))


def test_busy_workflow_fails_the_task_at_the_deadline() -> None:
    @workflow.defn
    class Busy:
        @workflow.run
        async def run(self) -> None:
            while True:  # noqa: ASYNC110 - the busy loop is the point of the test
                await asyncio.sleep(0)

    wf = instance(Busy)
    wf.deadline = time.monotonic() + 0.05
    with pytest.raises(workflow.WorkflowTaskError, match="deadline"):
        wf.activate(activation(start(Busy)))


def test_resolution_for_an_unknown_seq_fails_the_task() -> None:
    wf = instance(OneActivity)
    wf.activate(activation(start(OneActivity, Order("o", 1))))
    with pytest.raises(workflow.WorkflowTaskError, match="unknown activity seq 9"):
        wf.activate(activation(completed(9, None)))


def test_cancelled_activity_await_requests_cancel_and_drops_the_late_result() -> None:
    @workflow.defn
    class Race:
        @workflow.run
        async def run(self) -> str:
            slow = asyncio.ensure_future(
                workflow.execute_activity("slow", start_to_close_timeout=TIMEOUT)
            )
            timer = asyncio.ensure_future(workflow.sleep(60))
            done, _ = await asyncio.wait([slow, timer], return_when=asyncio.FIRST_COMPLETED)
            if slow not in done:
                slow.cancel()
                return "timed out"
            return "fast"

    wf = instance(Race)
    out = wf.activate(activation(start(Race)))
    assert kinds(out.commands) == ["schedule_activity", "start_timer"]
    done = wf.activate(activation(fire(2)))
    # The loser gets a RequestCancelActivity carrying its own seq; the run completes.
    assert kinds(done.commands) == ["request_cancel_activity", "complete_workflow"]
    assert done.commands[0].request_cancel_activity.activity_seq == done.commands[0].seq == 1
    assert result_of(done.commands[1]) == "timed out"
    assert wf.activate(activation(completed(1, None))).commands == []


def test_workflow_api_outside_a_workflow_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not running inside workflow code"):
        workflow.now()


def test_definition_metadata() -> None:
    d = workflow.definition_of(OneActivity)
    assert (d.name, d.version) == ("OneActivity", "1")
    assert len(d.fingerprint) == 64
    assert d.arg_hints == (Order,)
    with pytest.raises(TypeError, match=r"exactly one @workflow\.run"):

        @workflow.defn
        class NoRun:
            pass


def test_commands_are_workflow_task_commands() -> None:
    out = instance(OneActivity).activate(activation(start(OneActivity, Order("o", 1))))
    assert isinstance(out, workflow_task_pb2.ActivationCompletion)
