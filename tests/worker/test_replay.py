"""The runtime behind the real Rust replay machine: recorded histories replay cleanly,
and changed workflow code is caught as nondeterminism."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import timedelta

import pytest

from durable_rpc import converter, workflow
from durable_rpc._core import NondeterminismError
from durable_rpc.workflow import definition_of
from tests.worker.recorder import Recorder

T = timedelta(seconds=5)


@dataclass
class Shipment:
    order_id: str
    items: list[str]


@workflow.defn(name="Fulfil")
class Fulfil:
    def __init__(self) -> None:
        self.notes: list[str] = []

    @workflow.signal
    def note(self, text: str) -> None:
        self.notes.append(text)

    @workflow.run
    async def run(self, shipment: Shipment) -> dict[str, object]:
        reserved = await workflow.execute_activity(
            "reserve", shipment.order_id, start_to_close_timeout=T, result_type=bool
        )
        labels = await asyncio.gather(
            *(
                workflow.execute_activity("label", item, start_to_close_timeout=T)
                for item in shipment.items
            )
        )
        await workflow.sleep(timedelta(hours=1))
        try:
            await workflow.execute_activity("notify", start_to_close_timeout=T)
        except workflow.ActivityError as err:
            self.notes.append(f"notify failed: {err.cause.type}")
        return {
            "reserved": reserved,
            "labels": labels,
            "notes": self.notes,
            "id": str(workflow.uuid4()),
            "at": workflow.now().isoformat(),
        }


@workflow.defn(name="Fulfil")
class FulfilChanged:
    """A deploy that reorders the calls: label before reserve."""

    @workflow.run
    async def run(self, shipment: Shipment) -> None:
        await workflow.execute_activity("label", "x", start_to_close_timeout=T)


def record_fulfil() -> tuple[Recorder, dict[str, object]]:
    rec = Recorder(definition_of(Fulfil), Shipment("o-9", ["a", "b"]))
    assert [c.schedule_activity.activity_type for c in rec.task()] == ["reserve"]
    rec.activity_completed(1, True)
    rec.signal("note", "fragile")
    assert [(c.seq, c.schedule_activity.activity_type) for c in rec.task()] == [
        (2, "label"),
        (3, "label"),
    ]
    rec.activity_completed(3, "L-b")
    assert rec.task() == []
    rec.activity_completed(2, "L-a")
    (timer,) = rec.task()
    assert (timer.seq, timer.start_timer.duration.seconds) == (4, 3600)
    rec.timer_fired(4)
    (notify,) = rec.task()
    assert notify.seq == 5
    rec.activity_failed(5, "SmtpDown", "no route")
    (done,) = rec.task()
    assert done.WhichOneof("kind") == "complete_workflow"
    return rec, converter.decode(done.complete_workflow.result.data)


def test_a_recorded_history_replays_with_no_new_commands() -> None:
    rec, result = record_fulfil()
    assert result["labels"] == ["L-a", "L-b"]
    assert result["notes"] == ["fragile", "notify failed: SmtpDown"]
    assert rec.replay_all() == []


def test_replay_reproduces_time_and_random_values() -> None:
    rec, first = record_fulfil()
    # Re-record from scratch: the same history gives the same deterministic values.
    _, second = record_fulfil()
    assert first["id"] == second["id"]
    assert first["at"] == second["at"]
    del rec


def test_changed_code_raises_nondeterminism_error() -> None:
    rec, _ = record_fulfil()
    with pytest.raises(NondeterminismError) as info:
        rec.replay_all(definition_of(FulfilChanged))
    assert info.value.seq == 1
    assert "reserve" in info.value.expected
    assert "label" in info.value.actual


def test_cancellation_through_the_machine() -> None:
    @workflow.defn(name="Waits")
    class Waits:
        @workflow.run
        async def run(self) -> None:
            await workflow.sleep(60)

    rec = Recorder(definition_of(Waits))
    assert [c.WhichOneof("kind") for c in rec.task()] == ["start_timer"]
    rec.cancel_requested("stop")
    assert [c.WhichOneof("kind") for c in rec.task()] == ["cancel_timer", "cancel_workflow"]
    assert rec.replay_all() == []
