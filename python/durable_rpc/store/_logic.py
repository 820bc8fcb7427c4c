"""Dialect-independent pieces: payload parsing, event building, command validation,
activity timeouts and retry backoff. No I/O and no clock here: callers pass the
database time in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf import duration_pb2
from google.protobuf.message import DecodeError, Message

from durable_rpc.errors import InvalidArgumentError, InvalidPayloadError, InvalidPriorityError
from durable_rpc.store._fairness import MAX_PRIORITY, MIN_PRIORITY
from durable_rpc.store._session_options import validate_session_options
from durable_rpc.store._stream_limits import check_batch, check_page, check_stream
from durable_rpc.v1 import history_pb2, options_pb2, payload_pb2, workflow_task_pb2

#: Events delivered to workflow code (a new one after a task's view needs a new task).
INPUT_EVENT_KINDS: tuple[str, ...] = (
    "workflow_started",
    # Budgets: a reservation granted or refused (store/_budgets).
    "budget_reserved",
    "budget_reserve_failed",
    "activity_completed",
    "activity_failed",
    "timer_fired",
    "signal_received",
    "cancel_requested",
    # Child workflows.
    "child_workflow_started",
    "child_workflow_start_failed",
    "child_workflow_completed",
    "child_workflow_failed",
    "child_workflow_cancelled",
    "child_workflow_terminated",
    "child_workflow_timed_out",
    # Signals sent to other runs.
    "external_signal_delivered",
    "external_signal_failed",
    "activity_cancelled",
    # Message streams: the page a read consumed (store/_streams).
    "stream_read",
)

#: Marker kinds of record_marker commands (MarkerRecorded events).
SIDE_EFFECT_MARKER = "side_effect"
LOCAL_ACTIVITY_MARKER = "local_activity"
PATCH_MARKER = "patch"
VERSION_MARKER = "version"
#: workflow.parallel / workflow.selection: a group's membership, a selection's winner.
PARALLEL_MARKER = "parallel"
SELECTION_MARKER = "selection"
SELECTION_WINNER_MARKER = "selection_winner"
GROUP_MARKERS = frozenset({PARALLEL_MARKER, SELECTION_MARKER, SELECTION_WINNER_MARKER})

#: Commands that close the run; must be the last command of a task.
TERMINAL_COMMANDS: frozenset[str] = frozenset(
    {"complete_workflow", "fail_workflow", "cancel_workflow", "continue_as_new"}
)

DEFAULT_RETRY_INITIAL_MS = 1_000
DEFAULT_RETRY_COEFFICIENT = 2.0
DEFAULT_RETRY_MAX_FACTOR = 100

ACTIVITY_TIMEOUT_ERROR = "ActivityTimeoutError"
AMBIGUOUS_EFFECT_ERROR = "AmbiguousEffectError"


def parse_payload(data: bytes, what: str = "payload") -> payload_pb2.Payload:
    try:
        return payload_pb2.Payload.FromString(data)
    except DecodeError as exc:
        raise InvalidPayloadError(f"{what} is not a serialized Payload: {exc}") from exc


def parse_failure(data: bytes, what: str = "failure") -> payload_pb2.Failure:
    try:
        return payload_pb2.Failure.FromString(data)
    except DecodeError as exc:
        raise InvalidPayloadError(f"{what} is not a serialized Failure: {exc}") from exc


def parse_options(data: bytes) -> options_pb2.ActivityOptions:
    return options_pb2.ActivityOptions.FromString(data)


def make_event(event_id: int, now_ms: int, kind: str, attributes: Message) -> bytes:
    """One serialized HistoryEvent with ``kind`` (the oneof field name) set."""
    event = history_pb2.HistoryEvent(event_id=event_id)
    event.event_time.FromMilliseconds(now_ms)
    getattr(event, kind).CopyFrom(attributes)
    return event.SerializeToString()


def failure_bytes(message: str, type_: str, *, cause: bytes | None = None) -> bytes:
    failure = payload_pb2.Failure(message=message, type=type_)
    if cause:
        failure.cause.CopyFrom(payload_pb2.Failure.FromString(cause))
    return failure.SerializeToString()


def duration_ms(duration: duration_pb2.Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def _optional_ms(owner: Message, field: str) -> int | None:
    """A timeout field: unset or zero means "no timeout"."""
    if not owner.HasField(field):
        return None
    value = duration_ms(getattr(owner, field))
    return value if value > 0 else None


@dataclass(frozen=True, slots=True)
class ActivityTimeouts:
    start_to_close_ms: int | None
    schedule_to_close_ms: int | None
    schedule_to_start_ms: int | None
    heartbeat_ms: int | None

    def lease_ms(self, default_ms: int) -> int:
        """Lease of one attempt: heartbeat, else start_to_close, else schedule_to_close."""
        for value in (self.heartbeat_ms, self.start_to_close_ms, self.schedule_to_close_ms):
            if value is not None:
                return value
        return default_ms


def activity_timeouts(options: options_pb2.ActivityOptions) -> ActivityTimeouts:
    return ActivityTimeouts(
        start_to_close_ms=_optional_ms(options, "start_to_close_timeout"),
        schedule_to_close_ms=_optional_ms(options, "schedule_to_close_timeout"),
        schedule_to_start_ms=_optional_ms(options, "schedule_to_start_timeout"),
        heartbeat_ms=_optional_ms(options, "heartbeat_timeout"),
    )


def earliest(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def workflow_task_backoff_ms(attempt: int, initial_ms: int, max_ms: int) -> int:
    """Delay before retrying workflow task ``attempt`` (1 = first) after it failed."""
    exponent = min(max(attempt - 1, 0), 62)
    return int(min(initial_ms * (2**exponent), max_ms))


def activity_retry_delay_ms(
    options: options_pb2.ActivityOptions,
    attempt: int,
    failure: payload_pb2.Failure,
    now_ms: int,
    schedule_to_close_deadline_ms: int | None,
) -> int | None:
    """Delay before the next attempt after ``attempt`` failed, or None for a final failure."""
    return retry_delay_ms(
        options.retry_policy, attempt, failure, now_ms, schedule_to_close_deadline_ms
    )


def retry_delay_ms(
    policy: options_pb2.RetryPolicy,
    attempt: int,
    failure: payload_pb2.Failure,
    now_ms: int,
    deadline_ms: int | None,
) -> int | None:
    """Delay before the attempt after ``attempt`` (an activity's or a child run's) under
    ``policy``, or None when ``failure`` is final: non-retryable, attempts exhausted, or
    the next attempt would start at or after ``deadline_ms``."""
    if failure.non_retryable or failure.type in policy.non_retryable_error_types:
        return None
    if policy.maximum_attempts > 0 and attempt >= policy.maximum_attempts:
        return None
    initial = _optional_ms(policy, "initial_interval") or DEFAULT_RETRY_INITIAL_MS
    coefficient = policy.backoff_coefficient or DEFAULT_RETRY_COEFFICIENT
    maximum = _optional_ms(policy, "maximum_interval") or initial * DEFAULT_RETRY_MAX_FACTOR
    exponent = min(max(attempt - 1, 0), 200)
    try:
        raw = initial * coefficient**exponent
    except OverflowError:
        raw = float(maximum)
    delay = int(min(raw, maximum))
    if deadline_ms is not None and now_ms + delay >= deadline_ms:
        return None
    return delay


def _check_duration(duration: duration_pb2.Duration, what: str) -> None:
    if duration.seconds < 0 or duration.nanos < 0:
        raise InvalidArgumentError(f"{what} must not be negative")


def validate_activity_options(options: options_pb2.ActivityOptions, seq: int) -> None:
    for field in (
        "start_to_close_timeout",
        "schedule_to_close_timeout",
        "schedule_to_start_timeout",
        "heartbeat_timeout",
    ):
        _check_duration(getattr(options, field), f"command seq {seq}: {field}")
    validate_retry_policy(options.retry_policy, f"command seq {seq}")
    if options.priority and not MIN_PRIORITY <= options.priority <= MAX_PRIORITY:
        raise InvalidPriorityError(
            f"command seq {seq}: priority must be {MIN_PRIORITY} (most urgent) to "
            f"{MAX_PRIORITY} (0: the run's), got {options.priority}"
        )
    if options.HasField("session"):
        validate_session_options(options.session, f"command seq {seq}")


def validate_retry_policy(policy: options_pb2.RetryPolicy, where: str) -> None:
    """An activity's or a child workflow's retry policy (``where`` names the command)."""
    for field in ("initial_interval", "maximum_interval"):
        _check_duration(getattr(policy, field), f"{where}: retry_policy.{field}")
    if policy.backoff_coefficient != 0 and policy.backoff_coefficient < 1:
        raise InvalidArgumentError(f"{where}: retry_policy.backoff_coefficient must be >= 1")
    if policy.maximum_attempts < 0:
        raise InvalidArgumentError(f"{where}: retry_policy.maximum_attempts < 0")


@dataclass(frozen=True, slots=True)
class CommandPlan:
    """What a validated command list needs checked against the stored run."""

    #: seqs of the new activities and timers (must not exist in the run yet).
    new_seqs: tuple[int, ...]
    #: timer seqs cancelled that were not started by this same command list.
    cancelled_existing_timers: tuple[int, ...]


def validate_commands(commands: Sequence[workflow_task_pb2.Command]) -> CommandPlan:
    """Checks everything that needs no stored state; raises InvalidArgumentError."""
    new_seqs: list[int] = []
    seen: set[int] = set()
    started_timers: set[int] = set()
    cancelled_existing: list[int] = []
    for index, command in enumerate(commands):
        kind = command.WhichOneof("kind")
        if kind is None:
            raise InvalidArgumentError(f"command #{index} has no kind")
        if kind in TERMINAL_COMMANDS:
            if index != len(commands) - 1:
                raise InvalidArgumentError(f"{kind} must be the last command")
            continue
        if kind == "cancel_timer":
            target = command.cancel_timer.timer_seq
            if target <= 0:
                raise InvalidArgumentError(f"command #{index}: cancel_timer.timer_seq must be > 0")
            if target not in started_timers:
                cancelled_existing.append(target)
            continue
        if kind == "request_cancel_activity":
            # Carries the activity's own seq (like cancel_timer): no new seq is taken.
            target = command.request_cancel_activity.activity_seq
            if target <= 0 or command.seq != target:
                raise InvalidArgumentError(
                    f"command #{index}: request_cancel_activity needs activity_seq > 0 "
                    "equal to its seq"
                )
            continue
        if kind == "request_cancel_child_workflow":
            # Carries the child's own seq (like cancel_timer): no new seq is taken.
            target = command.request_cancel_child_workflow.child_seq
            if target <= 0 or command.seq != target:
                raise InvalidArgumentError(
                    f"command #{index}: request_cancel_child_workflow needs child_seq > 0 "
                    "equal to its seq"
                )
            continue
        if kind == "release_budget":
            # Carries the reservation's own seq (like cancel_timer): no new seq is taken.
            target = command.release_budget.reservation_seq
            if target <= 0 or command.seq != target:
                raise InvalidArgumentError(
                    f"command #{index}: release_budget needs reservation_seq > 0 equal to its seq"
                )
            continue
        if kind == "upsert_search_attributes":
            # Carries no seq; its values are validated when applied (_search).
            continue
        if kind == "upsert_memo":
            # Carries no seq; its keys are validated when applied (_memo).
            continue
        if kind in ("accept_update", "complete_update"):
            # Updates take no seq; they are identified by their update id.
            update = getattr(command, kind)
            if not update.update_id:
                raise InvalidArgumentError(f"command #{index} ({kind}): update_id is empty")
            if kind == "complete_update" and update.WhichOneof("outcome") is None:
                raise InvalidArgumentError(f"command #{index}: complete_update needs an outcome")
            continue
        if kind == "record_marker" and command.record_marker.kind == PATCH_MARKER:
            # Patch markers take no seq (adding one never shifts later seqs).
            if command.seq != 0:
                raise InvalidArgumentError(f"command #{index}: a patch marker takes no seq")
            if not command.record_marker.id:
                raise InvalidArgumentError(f"command #{index}: patch marker id is empty")
            continue
        if kind == "record_marker" and command.record_marker.kind == VERSION_MARKER:
            # Version markers take no seq either; the payload is the recorded version,
            # which replay hands back to get_version().
            if command.seq != 0:
                raise InvalidArgumentError(f"command #{index}: a version marker takes no seq")
            if not command.record_marker.id:
                raise InvalidArgumentError(f"command #{index}: version marker id is empty")
            if not command.record_marker.HasField("payload"):
                raise InvalidArgumentError(
                    f"command #{index}: version marker {command.record_marker.id!r} "
                    "carries no version payload"
                )
            continue
        seq = command.seq
        if seq <= 0:
            raise InvalidArgumentError(f"command #{index} ({kind}): seq must be > 0")
        if seq in seen:
            raise InvalidArgumentError(f"command #{index} ({kind}): duplicate seq {seq}")
        seen.add(seq)
        new_seqs.append(seq)
        if kind == "schedule_activity":
            activity = command.schedule_activity
            if not activity.activity_type:
                raise InvalidArgumentError(f"command seq {seq}: activity_type is empty")
            validate_activity_options(activity.options, seq)
        elif kind == "reserve_budget":
            if not command.reserve_budget.budget:
                raise InvalidArgumentError(f"command seq {seq}: reserve_budget.budget is empty")
            if command.reserve_budget.amount <= 0:
                raise InvalidArgumentError(
                    f"command seq {seq}: reserve_budget.amount must be > 0, "
                    f"got {command.reserve_budget.amount}"
                )
        elif kind in ("read_stream", "append_to_stream"):
            _check_stream_command(command, seq)
        elif kind == "start_timer":
            _check_duration(command.start_timer.duration, f"command seq {seq}: timer duration")
            started_timers.add(seq)
        elif kind == "record_marker" and command.record_marker.kind in GROUP_MARKERS:
            _check_group_marker(command.record_marker, seq)
        elif kind == "record_marker" and command.record_marker.kind not in (
            SIDE_EFFECT_MARKER,
            LOCAL_ACTIVITY_MARKER,
        ):
            raise InvalidArgumentError(
                f"command seq {seq}: unknown marker kind {command.record_marker.kind!r} "
                f"(expected {SIDE_EFFECT_MARKER!r}, {LOCAL_ACTIVITY_MARKER!r}, {PATCH_MARKER!r}, "
                f"{VERSION_MARKER!r}, {PARALLEL_MARKER!r}, {SELECTION_MARKER!r} "
                f"or {SELECTION_WINNER_MARKER!r})"
            )
    return CommandPlan(tuple(new_seqs), tuple(cancelled_existing))


def _check_group_marker(marker: workflow_task_pb2.RecordMarker, seq: int) -> None:
    """A group marker holds its keys (a selection winner: the key, and the selection's
    seq as its id); replay reads them back, so one without them is refused."""
    if not marker.HasField("payload"):
        raise InvalidArgumentError(f"command seq {seq}: {marker.kind} marker carries no payload")
    if marker.kind == SELECTION_WINNER_MARKER and not marker.id.isdigit():
        raise InvalidArgumentError(
            f"command seq {seq}: selection_winner marker id must be the selection's seq, "
            f"got {marker.id!r}"
        )


def _check_stream_command(command: workflow_task_pb2.Command, seq: int) -> None:
    where = f"command seq {seq}"
    if command.HasField("read_stream"):
        read = command.read_stream
        check_stream(read.stream)
        if read.limit <= 0:
            raise InvalidArgumentError(f"{where}: read_stream.limit must be > 0")
        check_page(read.offset, read.limit)
        return
    check_stream(command.append_to_stream.stream)
    check_batch(len(command.append_to_stream.items), where)


def lease_lost_message(task_id: int, worker_id: str, fencing_token: int) -> str:
    return (
        f"task {task_id}: worker {worker_id!r} with fencing token {fencing_token} "
        "no longer holds the lease"
    )
