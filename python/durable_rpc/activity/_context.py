"""What a running activity can ask about itself: ``info()``, ``heartbeat()``, cancellation.

The context lives in a contextvar, so it follows the activity into the worker's thread
pool (sync activities run under a copy of the context) and never leaks between
concurrently running activities.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ActivityInfo:
    """The identity of the running attempt."""

    task_id: int
    attempt: int
    fencing_token: int
    workflow_id: str
    run_id: str
    activity_type: str
    seq: int
    task_queue: str
    heartbeat_details: Sequence[Any]
    """Details of the last heartbeat of an earlier attempt (plain values), for resuming."""


class ActivityContext:
    """Per-attempt state shared between the activity and the worker's lease keeper."""

    def __init__(self, info: ActivityInfo) -> None:
        self.info = info
        # Written by the activity (any thread), read by the lease keeper; replacing a
        # tuple reference is atomic, so no lock is needed.
        self.details: tuple[Any, ...] | None = None
        self.cancelled = threading.Event()


_current: contextvars.ContextVar[ActivityContext] = contextvars.ContextVar(
    "durable_rpc_activity_context"
)


def current_context() -> ActivityContext:
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("not running inside an activity") from None


def set_context(context: ActivityContext) -> contextvars.Token[ActivityContext]:
    return _current.set(context)


def info() -> ActivityInfo:
    """The running attempt's identity; ``fencing_token`` protects external writes."""
    return current_context().info


def heartbeat(*details: Any) -> None:
    """Record progress; the worker's automatic lease heartbeats carry the last details.

    Cheap to call often: nothing is sent here. Heartbeats go out at half the lease (or
    half the heartbeat timeout), so the lease never lapses while the activity runs.
    """
    current_context().details = details


def is_cancelled() -> bool:
    """True once the attempt was cancelled or its lease was lost; sync code should stop."""
    return current_context().cancelled.is_set()
