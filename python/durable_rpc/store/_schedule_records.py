"""What the schedule operations return (store-level records)."""

from __future__ import annotations

from dataclasses import dataclass, field

from durable_rpc.store._schedule_spec import ScheduleSpec


@dataclass(frozen=True)
class ScheduleDefinition:
    """What a schedule starts and when (create and update take one)."""

    workflow_type: str
    workflow_version: str
    task_queue: str
    input: bytes
    spec: ScheduleSpec
    overlap: str = "SKIP"
    #: A due time missed by more than this (server down, store unavailable) is skipped.
    catchup_window_ms: int = 365 * 24 * 3600 * 1000


@dataclass(frozen=True)
class ScheduleAction:
    due_ms: int
    #: started | skipped | buffered | missed | already_running
    action: str
    workflow_id: str
    run_id: str
    at_ms: int


@dataclass(frozen=True)
class ScheduleInfo:
    schedule_id: str
    definition: ScheduleDefinition
    paused: bool
    note: str
    created_at_ms: int
    next_due_ms: list[int] = field(default_factory=list)
    recent_actions: list[ScheduleAction] = field(default_factory=list)


@dataclass(frozen=True)
class ScheduleFiring:
    """One pass of ``fire_schedules``: what started and when to look next."""

    db_now_ms: int
    started: int
    next_fire_ms: int | None
    #: (namespace, run id) of the open runs that waiting (buffered) due times wait for:
    #: the close of one is when to look again.
    waiting_on: frozenset[tuple[str, str]] = frozenset()
