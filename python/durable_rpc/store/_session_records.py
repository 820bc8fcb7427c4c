"""The record of a worker session the store hands out (``_sessions``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WorkerSessionRecord:
    namespace: str
    session_id: str
    task_queue: str
    #: "pending", "active", "lost" (an active session whose holder's lease lapsed, as of
    #: the reading transaction's database time) or "closed".
    state: str
    holder_worker_id: str | None
    generation: int
    lease_expires_at_ms: int | None
    #: None while pending: the TTL counts from the session's creation on a worker.
    ttl_expires_at_ms: int | None
    #: Serialized SessionOptions, as the session was created with.
    options: bytes
    close_reason: str | None
    created_at_ms: int
    reacquisitions: int
