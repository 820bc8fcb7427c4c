"""Worker sessions (resource affinity): route activities to the one worker holding a
session, e.g. the worker whose GPU holds a loaded model.

```python
from durable_rpc.sessions import SessionOptions

gpu = SessionOptions(lease_seconds=30, ttl_seconds=3600, requires={"gpu": "a100"})
frames = await workflow.execute_activity(decode, path, session=gpu)
await workflow.execute_activity(render, frames, session=gpu)   # on the same worker

worker = Worker(client, task_queue="media", activities=[decode, render],
                worker_sessions=True, capabilities={"gpu": "a100"},
                max_concurrent_worker_sessions=2)
```

The server creates the session on the first worker that claims one of its activities
(with the capabilities ``requires`` names and a free session slot); the session's later
activities run only on that holder. The holder keeps it while its lease lasts (renewed
by its claims, its activities' heartbeats and :meth:`WorkerSessionHandle.renew`); a
holder that went silent is *lost* and the next activity may run on another qualifying
worker, which keeps the session's original TTL deadline. Past the TTL the session
closes and its queued activities fail with ``ActivityError`` of type ``SessionClosed``.
Session memory is process-local: a new holder rebuilds its resources, and an
interrupted activity may run again (use the fencing token for external writes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from durable_rpc.v1 import options_pb2, session_service_pb2

#: Bounds the server applies too (INVALID_SESSION_OPTIONS).
_MAX_TEXT = 200


def capability_map(value: Mapping[str, str] | Sequence[str] | None) -> dict[str, str]:
    """Capabilities or requirements given as a mapping, or as names (each ``"true"``)."""
    if value is None:
        return {}
    if isinstance(value, Mapping):
        items = dict(value)
    elif isinstance(value, str):
        raise TypeError("capabilities must be a mapping or a list of names, not a str")
    else:
        items = {name: "true" for name in value}
    for key, text in items.items():
        if not isinstance(key, str) or not isinstance(text, str):
            raise TypeError(f"capability {key!r}: keys and values must be str")
        if not key or not text or len(key) > _MAX_TEXT or len(text) > _MAX_TEXT:
            raise ValueError(f"capability {key!r}: keys and values must be 1 to 200 characters")
    return items


@dataclass(frozen=True)
class SessionOptions:
    """Routing and lifetime of one worker session.

    ``session_id`` names a session shared by every run that names it; None: the run's
    own session (one per run). ``lease_seconds`` bounds the holder's authority between
    renewals; ``ttl_seconds`` the session's whole life from its creation (never
    extended). ``max_concurrent_activities`` bounds how many of its activities run at
    once (0: no bound). ``requires``: capabilities the holder must have (a mapping, or
    names meaning ``"true"``). Recorded with each activity: replaying code that changed
    them fails with a NondeterminismError."""

    session_id: str | None = None
    lease_seconds: int = 60
    ttl_seconds: int = 3600
    max_concurrent_activities: int = 0
    requires: Mapping[str, str] | Sequence[str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("lease_seconds", "ttl_seconds", "max_concurrent_activities"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"SessionOptions.{name} must be an int, got {value!r}")
        if self.ttl_seconds <= 0:
            raise ValueError(f"session ttl_seconds must be > 0, got {self.ttl_seconds}")
        if not 0 < self.lease_seconds <= self.ttl_seconds:
            raise ValueError(
                f"session lease_seconds must be > 0 and <= ttl_seconds ({self.ttl_seconds}), "
                f"got {self.lease_seconds}"
            )
        if self.max_concurrent_activities < 0:
            raise ValueError(
                "session max_concurrent_activities must be >= 0, got "
                f"{self.max_concurrent_activities}"
            )
        if self.session_id is not None and not 0 < len(self.session_id) <= _MAX_TEXT:
            raise ValueError("session_id must be 1 to 200 characters (None: the run's own)")
        object.__setattr__(self, "requires", capability_map(self.requires))

    def to_proto(self) -> options_pb2.SessionOptions:
        return options_pb2.SessionOptions(
            session_id=self.session_id or "",
            lease_seconds=self.lease_seconds,
            ttl_seconds=self.ttl_seconds,
            max_concurrent_activities=self.max_concurrent_activities,
            requires=dict(self.requires),  # type: ignore[arg-type]
        )


@dataclass(frozen=True)
class WorkerSession:
    """One session as the server last reported it (``activity.session()``: as the
    attempt's claim left it). ``state``: "pending", "active", "lost" (the holder's
    lease lapsed) or "closed"."""

    session_id: str
    task_queue: str
    state: str
    holder_worker_id: str
    generation: int
    lease_expires_at: datetime | None
    ttl_expires_at: datetime | None
    close_reason: str
    reacquisitions: int

    @classmethod
    def from_proto(cls, message: session_service_pb2.WorkerSession) -> WorkerSession:
        return cls(
            session_id=message.session_id,
            task_queue=message.task_queue,
            state=message.state,
            holder_worker_id=message.holder_worker_id,
            generation=message.generation,
            lease_expires_at=message.lease_expires_at.ToDatetime(tzinfo=UTC)
            if message.HasField("lease_expires_at")
            else None,
            ttl_expires_at=message.ttl_expires_at.ToDatetime(tzinfo=UTC)
            if message.HasField("ttl_expires_at")
            else None,
            close_reason=message.close_reason,
            reacquisitions=message.reacquisitions,
        )


__all__ = ["SessionOptions", "WorkerSession"]
