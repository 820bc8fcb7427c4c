"""The values the workflow runtime shares with workflow code and the worker: the
run's identity, what it keeps for a scheduled activity, local activity requests and
outcomes, and the inline data of a received payload."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from durable_rpc.v1 import payload_pb2
from durable_rpc.workflow._errors import WorkflowTaskError


@dataclass(frozen=True)
class WorkflowInfo:
    """The identity of the running workflow, as seen by its code."""

    workflow_id: str
    run_id: str
    workflow_type: str
    workflow_version: str
    task_queue: str
    is_replaying: bool
    #: Set at start (memo) and at start or by upsert_search_attributes (search attributes).
    memo: dict[str, Any] = field(default_factory=dict)
    search_attributes: dict[str, Any] = field(default_factory=dict)
    #: The run this one continues (continue-as-new); empty for a run a client started.
    continued_from_run_id: str = ""
    #: The history as the current workflow task saw it: events and serialized bytes.
    #: Replay gives each activation the values it had live, so branching on them is
    #: deterministic.
    history_length: int = 0
    history_size_bytes: int = 0
    #: True once the history reached the server's warn mark (events or bytes): the run
    #: should continue-as-new before the hard limit fails it.
    continue_as_new_suggested: bool = False


#: The server's default history warn marks (events, bytes), for tasks that name none.
DEFAULT_HISTORY_WARN = (10_240, 10 * 1024 * 1024)


@dataclass
class PendingActivity:
    future: asyncio.Future[Any]
    activity_type: str
    result_hint: Any


def payload_data(p: payload_pb2.Payload) -> bytes:
    """The inline frame of ``p``; the SDK's payload channel (``client/_payload_channel``)
    puts referenced payloads back inline before a task reaches the workflow runtime."""
    if not p.data and p.HasField("external"):
        raise WorkflowTaskError("received an external payload reference without its data")
    return p.data


@dataclass(frozen=True)
class LocalActivityRequest:
    """A local activity the workflow is waiting for: the worker runs it during the
    workflow task and hands the outcome back with ``resolve_local_activities``."""

    seq: int
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    start_to_close_timeout: float | None
    retry_policy: Any
    #: Seconds all attempts together may take (with the backoffs between them).
    schedule_to_close_timeout: float | None = None
    #: Seconds an attempt may go without calling activity.heartbeat().
    heartbeat_timeout: float | None = None
    #: The workflow run it belongs to, for activity.info().
    workflow_id: str = ""
    run_id: str = ""
    task_queue: str = ""


@dataclass(frozen=True)
class LocalActivityOutcome:
    """``marker_id`` "" = completed (``data`` the encoded value); "failed" = failed
    for good (``data`` the encoded ``[type, message, attempt]``). ``attempts`` is the
    encoded attempt log recorded as the marker's details (b"" = none)."""

    seq: int
    marker_id: str
    data: bytes
    attempts: bytes = b""


@dataclass(frozen=True)
class CancellationRequest:
    """The run's cancellation request (``workflow.cancellation()``), as recorded in its
    history: the same on every replay."""

    reason: str
    #: When the server recorded the request (database clock).
    requested_at: datetime
    #: Past it, a run still open is terminated by the server (CLEANUP_DEADLINE_EXCEEDED);
    #: None when the requester gave no cleanup timeout.
    cleanup_deadline: datetime | None
