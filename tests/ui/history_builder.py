"""Small synthetic histories for the timeline and value tests: events with chosen kinds
and times, for the cases a recorded history cannot show (a hostile name, a new event
kind, a thousand activities). Recorded ones are under tests/ui/golden/."""

from __future__ import annotations

from typing import Any

from durable_rpc import payload
from durable_rpc.v1 import history_pb2, payload_pb2

T0 = 1_764_600_000_000  # 2025-12-01 14:40:00 UTC


class HistoryBuilder:
    def __init__(self, start_ms: int = T0) -> None:
        self.events: list[history_pb2.HistoryEvent] = []
        self.now = start_ms

    def add(self, kind: str, after_ms: int = 0, **fields: Any) -> history_pb2.HistoryEvent:
        """Append an event ``kind`` (a HistoryEvent oneof name) ``after_ms`` later."""
        self.now += after_ms
        event = history_pb2.HistoryEvent(event_id=len(self.events) + 1)
        event.event_time.FromMilliseconds(self.now)
        getattr(event, kind).SetInParent()
        for name, value in fields.items():
            target = getattr(event, kind)
            if isinstance(value, dict) and name != "metadata":
                getattr(target, name).CopyFrom(type(getattr(target, name))(**value))
            elif hasattr(getattr(target, name, None), "CopyFrom"):
                getattr(target, name).CopyFrom(value)
            else:
                setattr(target, name, value)
        self.events.append(event)
        return event

    def started(self, workflow_type: str = "Order", **fields: Any) -> HistoryBuilder:
        self.add(
            "workflow_started",
            workflow_type=workflow_type,
            workflow_id=fields.pop("workflow_id", "order-1"),
            run_id=fields.pop("run_id", "run-1"),
            task_queue="q",
            input=value([1]),
            **fields,
        )
        return self

    def task(self, after_ms: int = 5) -> HistoryBuilder:
        event = self.add("workflow_task_completed", after_ms, worker_id="w1")
        event.workflow_task_completed.workflow_time.FromMilliseconds(self.now - after_ms)
        return self


def value(v: Any) -> payload_pb2.Payload:
    return payload_pb2.Payload(data=payload.encode(v))


def failure(type_: str, message: str, stack: str = "") -> payload_pb2.Failure:
    return payload_pb2.Failure(type=type_, message=message, stack_trace=stack)


def all_kinds() -> list[str]:
    """Every event kind the HistoryEvent oneof knows (this build's protos)."""
    oneof = history_pb2.HistoryEvent.DESCRIPTOR.oneofs_by_name["attributes"]
    return [f.name for f in oneof.fields]


def unknown_kind_event(event_id: int, at_ms: int) -> history_pb2.HistoryEvent:
    """An event of a kind these protos do not know (a newer server's): field 999."""
    known = history_pb2.HistoryEvent(event_id=event_id)
    known.event_time.FromMilliseconds(at_ms)
    # Field 999, wire type 2 (length-delimited): tag varint (999 << 3 | 2), length 2.
    extra = bytes([0xBA, 0x3E, 0x02, 0x08, 0x01])
    return history_pb2.HistoryEvent.FromString(known.SerializeToString() + extra)
