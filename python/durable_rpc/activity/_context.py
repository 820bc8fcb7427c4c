"""What a running activity can ask about itself: ``info()``, ``heartbeat()``, cancellation.

The context lives in a contextvar, so it follows the activity into the worker's thread
pool (sync activities run under a copy of the context) and never leaks between
concurrently running activities.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from durable_rpc import converter
from durable_rpc.sessions import WorkerSession
from durable_rpc.v1 import session_service_pb2


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
    session: WorkerSession | None = None
    """The worker session the attempt runs in, as its claim left it (None: none)."""


class SessionViews(Protocol):
    """The worker's latest view of the sessions it holds (worker/_sessions.py), shared by
    every attempt of a session: a handle's renew moves each attempt's deadline."""

    def view(self, session_id: str) -> WorkerSession | None: ...

    def note(self, session: session_service_pb2.WorkerSession) -> WorkerSession: ...


class ActivityContext:
    """Per-attempt state shared between the activity and the worker's lease keeper."""

    def __init__(self, info: ActivityInfo, sessions: SessionViews | None = None) -> None:
        self.info = info
        self._sessions = sessions
        # Written by the activity (any thread), read by the lease keeper; replacing a
        # tuple reference is atomic, so no lock is needed.
        self.details: tuple[Any, ...] | None = None
        # How many times the activity called heartbeat(): with a heartbeat timeout the
        # worker only heartbeats on the activity's behalf when this moved, so an attempt
        # that hangs stops heartbeating and the server times it out.
        self.beats = 0
        self.cancelled = threading.Event()
        # Set with ``cancelled`` when the server asked for cancellation (not a lost lease).
        self.cancel_requested = False

    def session(self) -> WorkerSession | None:
        """The attempt's session as this worker last observed it: its claim, then every
        renewal reported since (heartbeats, claims, the handle's renew)."""
        claimed = self.info.session
        if claimed is None or self._sessions is None:
            return claimed
        return self._sessions.view(claimed.session_id) or claimed

    def note_session(self, session: session_service_pb2.WorkerSession) -> None:
        """A heartbeat renewed the attempt's session: the new deadlines."""
        if self._sessions is not None:
            self._sessions.note(session)
        else:
            self.info = replace(self.info, session=WorkerSession.from_proto(session))


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


def session() -> WorkerSession | None:
    """The worker session this attempt runs in (its id, holder, generation, lease and
    TTL deadlines), or None for an activity scheduled without ``session=``. The lease
    deadline is the latest this worker observed: its claim, then each renewal since (the
    attempts' heartbeats, its claims, a handle's renew). The worker stops the attempt,
    as a lost lease, once that deadline or the TTL passes. Its resources are this
    process's: a new holder rebuilds them."""
    return current_context().session()


def heartbeat(*details: Any) -> None:
    """Record progress; the worker's lease heartbeats carry the last details, and the
    next attempt reads them back from ``info().heartbeat_details``.

    Cheap to call often: nothing is sent here. Heartbeats go out at half the lease (or
    half the heartbeat timeout). With a heartbeat timeout, only an activity that keeps
    calling this keeps its attempt alive. Once the attempt is cancelled (the workflow
    was cancelled or closed) or its lease is lost, this raises CancelledError: the
    activity's way to stop (sync code can also poll :func:`is_cancelled`).
    """
    context = current_context()
    context.details = details
    context.beats += 1
    if context.cancelled.is_set():
        raise asyncio.CancelledError("the activity attempt was cancelled")


def heartbeat_details(*types: Any) -> tuple[Any, ...]:
    """The last heartbeat details of an earlier attempt, converted to ``types`` (one per
    detail, like an activity's parameters; missing ones are plain values)."""
    plain = tuple(info().heartbeat_details)
    return tuple(
        converter.from_value(value, types[i]) if i < len(types) else value
        for i, value in enumerate(plain)
    )


def is_cancelled() -> bool:
    """True once the attempt was cancelled or its lease was lost; sync code should stop."""
    return current_context().cancelled.is_set()
