"""The records of runs and tasks the store takes and returns, and the listener it tells.

Payload arguments are serialized ``payload_pb2.Payload`` bytes, failures serialized
``payload_pb2.Failure`` bytes, history events serialized ``history_pb2.HistoryEvent``
bytes. Every time is integer milliseconds since the epoch, read from the database clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from durable_rpc.run_statuses import STATUSES
from durable_rpc.store._session_records import WorkerSessionRecord
from durable_rpc.v1 import workflow_task_pb2

TaskKind = Literal["workflow", "activity", "query"]

RUN_STATUSES: frozenset[str] = frozenset(STATUSES)


class StoreListener(Protocol):
    """Told about changes after the commit that caused them (on the store's event loop)."""

    def tasks_available(self, namespace: str, task_queue: str, kind: TaskKind) -> None:
        """A task of ``kind`` became claimable now on ``task_queue``."""

    def due_at(self, due_ms: int) -> None:
        """Something (timer, retry backoff, lease expiry, deadline) is due at ``due_ms``:
        call :meth:`Store.process_due` then (and wake pollers)."""

    def run_closed(self, namespace: str, run_id: str, outcome: RunOutcome | None = None) -> None:
        """The run reached a terminal status (``outcome``, when this process closed it)."""

    def query_answered(self, namespace: str, query_id: str) -> None:
        """A worker answered the query (read it with :meth:`Store.query_answer`)."""

    def update_changed(self, namespace: str, update_id: str) -> None:
        """A decision accepted, completed or rejected the update."""

    def stream_appended(self, namespace: str, run_id: str) -> None:
        """A message stream of the run got items (read them with :meth:`Store.read_stream`)."""


@dataclass(frozen=True, slots=True)
class LeaseRef:
    """The proof of ownership every write after a claim carries."""

    task_id: int
    worker_id: str
    fencing_token: int


@dataclass(frozen=True, slots=True)
class StartOptions:
    """Optional settings of a new run."""

    #: Serialized Memo (not indexed).
    memo: bytes | None = None
    #: Serialized SearchAttributes (typed, indexed; validated).
    search_attributes: bytes | None = None
    #: Close the run as timed_out this long after its start (None/0 = never).
    execution_timeout_ms: int | None = None
    run_timeout_ms: int | None = None
    #: 1 (most urgent) .. 5; None = 3. Claims take a more urgent task first (``_fairness``).
    priority: int | None = None
    #: Claims share a priority fairly among keys (e.g. a tenant); None/'' = no key.
    fairness_key: str | None = None
    #: The run's concurrency key (``_admission``): its namespace may limit the open runs
    #: of one key. None/'' = no key.
    concurrency_key: str | None = None


@dataclass(frozen=True, slots=True)
class StartResult:
    run_id: str
    #: False when the request id matched an earlier start (nothing new was created).
    started: bool
    #: The run's first workflow task, when the start was asked to claim it (``claim_for``).
    workflow_task: ClaimedWorkflowTask | None = None


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """A new run continuing a failed run from its last completed activity."""

    run_id: str
    #: The failed run's events the new run starts from (its events after this one are
    #: left out, as are the activity failures no kept decision saw).
    resumed_after_event_id: int
    #: Completed activities the new run keeps (their results replay).
    kept_activities: int
    #: False when the request id had already redriven the run.
    started: bool


@dataclass(frozen=True, slots=True)
class DirectClaim:
    """Claim the new run's first workflow task for ``worker_id`` in the starting
    transaction: the server hands it to that worker's waiting poll, saving a claim."""

    worker_id: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class SignalWithStartResult:
    run_id: str
    #: True when this call started the run.
    started: bool
    #: False when the request id had already been delivered to that run.
    delivered: bool


@dataclass(frozen=True, slots=True)
class UpdateWithStartResult:
    #: The run the update request was recorded on.
    run_id: str
    #: True when this call started the run.
    started: bool


@dataclass(frozen=True, slots=True)
class RunInfo:
    workflow_id: str
    run_id: str
    workflow_type: str
    workflow_version: str
    task_queue: str
    status: str
    start_time_ms: int
    close_time_ms: int | None
    history_length: int
    #: The sum of the run's serialized events (what the byte limits count).
    history_size_bytes: int = 0
    #: Serialized Memo / SearchAttributes (describe and list_runs fill them).
    memo: bytes | None = None
    search_attributes: bytes | None = None


@dataclass(frozen=True, slots=True)
class PendingActivity:
    seq: int
    activity_type: str
    #: "queued", "leased" or "waiting" (backoff before a retry).
    state: str
    attempt: int
    last_failure: bytes | None
    worker_id: str | None
    #: "waiting": when the retry's backoff ends (database clock, epoch ms).
    next_attempt_ms: int | None = None
    #: "leased": when the attempt's lease runs out unless it heartbeats.
    lease_expires_ms: int | None = None
    #: The last heartbeat's details (a Payload), kept for the retries.
    heartbeat_details: bytes | None = None
    #: The worker session it runs in, if any.
    session_id: str | None = None


@dataclass(frozen=True, slots=True)
class RunDescription:
    info: RunInfo
    pending_activities: list[PendingActivity]
    last_workflow_task_failure: bytes | None
    workflow_task_attempt: int
    #: Whether a live worker polling the run's task queue registers its definition.
    definition_available: bool
    cancel_requested: bool
    #: Set from the history warn mark on: how close the run is to its hard limit.
    history_warning: str = ""
    #: For an open run whose definition is not available: why nothing runs it, in one
    #: plain sentence (workers claim only the definitions they registered). '' otherwise.
    definition_unavailable_reason: str = ""
    #: For an open run that makes no progress: what it waits for, in one plain sentence
    #: (``_stuck``). '' for a closed run or one making progress.
    stuck_reason: str = ""
    #: The build the run is pinned to ('' unversioned or not decided yet: _build_pins).
    build_id: str = ""
    #: Redrive links: the failed run this one continues, and the run that continues it.
    redriven_from_run_id: str = ""
    redriven_by_run_id: str = ""
    #: The run's claim priority (1 most urgent .. 5) and fairness key ('' none): its
    #: workflow and activity tasks are claimed in that order (``_fairness``).
    priority: int = 3
    fairness_key: str = ""


@dataclass(frozen=True, slots=True)
class HistoryPage:
    run_id: str
    events: list[bytes]
    has_more: bool


@dataclass(frozen=True, slots=True)
class RunOutcome:
    run_id: str
    #: "running" while the run is open.
    status: str
    result: bytes | None
    failure: bytes | None
    #: Status continued_as_new: the run that continues this one.
    next_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class PendingUpdateRequest:
    """An update request waiting for the run's workflow task to accept or reject it."""

    update_id: str
    update_name: str
    #: The serialized Payload of its arguments.
    input: bytes


@dataclass(frozen=True, slots=True)
class ClaimedWorkflowTask:
    task_id: int
    worker_id: str
    fencing_token: int
    lease_expires_at_ms: int
    #: Database time of the claim: the workflow's clock for this task.
    workflow_time_ms: int
    attempt: int
    workflow_id: str
    run_id: str
    workflow_type: str
    workflow_version: str
    task_queue: str
    #: The history at claim time (serialized HistoryEvent): all of it, or its first
    #: byte-bounded page when ``len(events) < history_length`` (the rest: get_history
    #: with ``through_event_id=history_length``).
    events: list[bytes]
    #: The run's update requests no decision settled yet, oldest first.
    pending_updates: tuple[PendingUpdateRequest, ...] = ()
    #: The run's whole history at the claim: events and serialized bytes.
    history_length: int = 0
    history_size_bytes: int = 0
    #: Database time from the task becoming claimable (scheduled, backoff over, lease
    #: expired) to this claim; 0 when claimed in the transaction that made it claimable.
    queue_delay_ms: int = 0

    @property
    def lease(self) -> LeaseRef:
        return LeaseRef(self.task_id, self.worker_id, self.fencing_token)


@dataclass(frozen=True, slots=True)
class EagerActivities:
    """Eager activity dispatch: claim, in the completing transaction, up to ``limit`` of
    the activities a workflow task schedules on ``task_queue`` (of ``activity_types``) for
    the completing worker, saving it a poll round trip per activity."""

    task_queue: str
    activity_types: frozenset[str]
    limit: int


@dataclass(frozen=True, slots=True)
class EagerWorkflowTask:
    """Eager workflow task: when completing an activity makes its run's workflow task
    claimable on ``task_queue``, claim it for the completing worker in the same
    transaction."""

    task_queue: str
    lease_ms: int


@dataclass(frozen=True, slots=True)
class InlineWorkflowTask:
    """A workflow task decided ahead by a worker that keeps the run's history: the
    commands its code produced after the completing activity's result. Recorded in the
    activity completion's transaction only when the run's history still ends at
    ``last_seen_event_id`` (so that result is the task's only new input) and the run has
    no other workflow task; the marker's workflow time is that transaction's database
    time (the worker decides inline only when the code did not read the clock)."""

    run_id: str
    last_seen_event_id: int
    commands: Sequence[workflow_task_pb2.Command]
    build_id: str = ""
    eager: EagerActivities | None = None


@dataclass(frozen=True, slots=True)
class WorkflowTaskCompletion:
    """What a recorded workflow-task decision produced: the activity attempts claimed
    eagerly, every event the transaction appended to the run (in order) and the run's
    history length after it, so a sticky worker can extend its copy of the history."""

    eager_activities: list[ClaimedActivityTask]
    appended_events: list[bytes]
    history_length: int


@dataclass(frozen=True, slots=True)
class ActivityCompletion:
    """An activity completion's answer: ``inline`` when the inline workflow task was
    recorded with it, else the run's next workflow task if it was claimed eagerly."""

    workflow_task: ClaimedWorkflowTask | None = None
    inline: WorkflowTaskCompletion | None = None


@dataclass(frozen=True, slots=True)
class ClaimedActivityTask:
    task_id: int
    worker_id: str
    fencing_token: int
    lease_expires_at_ms: int
    workflow_id: str
    run_id: str
    seq: int
    activity_type: str
    input: bytes
    attempt: int
    #: Details of the last heartbeat of an earlier attempt.
    heartbeat_details: bytes | None
    heartbeat_timeout_ms: int | None
    start_to_close_timeout_ms: int | None
    #: Serialized ActivityOptions as scheduled.
    options: bytes
    #: The trace context the activity was scheduled with (empty: none).
    trace_context: Mapping[str, str] = field(default_factory=dict)
    #: As ClaimedWorkflowTask.queue_delay_ms.
    queue_delay_ms: int = 0
    #: The worker session the attempt runs in, as this claim left it (None: none).
    session: WorkerSessionRecord | None = None

    @property
    def lease(self) -> LeaseRef:
        return LeaseRef(self.task_id, self.worker_id, self.fencing_token)


@dataclass(frozen=True, slots=True)
class ActivityPoll:
    """A claim attempt's answer to a long poll: the task, or when to try again."""

    task: ClaimedActivityTask | None
    #: In how long (ms, by the database clock) an empty bucket of the namespace's rate
    #: limits next has a token: a task it holds back may be claimable then. None: only
    #: a wake-up helps.
    retry_in_ms: int | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    cancel_requested: bool
    lease_expires_at_ms: int
    #: The attempt's worker session as this heartbeat renewed it (None: no session, or
    #: not renewed: closed, past its TTL, another holder).
    session: WorkerSessionRecord | None = None


@dataclass(frozen=True, slots=True)
class DueReport:
    fired_timers: int
    expired_activity_attempts: int
    #: Earliest pending due time (waiting visibility, lease expiry, deadline), if any.
    next_due_ms: int | None
    db_now_ms: int
