"""When a schedule is due: its cron or interval spec, time zone and jitter (pure logic).

Due times are database-clock milliseconds. A spec is checked once, at create/update, so a
bad cron expression or time zone is refused with INVALID_ARGUMENT before anything is
stored; the firing pass only ever evaluates specs that parsed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from durable_rpc.errors import InvalidArgumentError

OVERLAP_POLICIES = (
    "SKIP",
    "BUFFER_ONE",
    "BUFFER_ALL",
    "ALLOW_ALL",
    "CANCEL_OTHER",
    "TERMINATE_OTHER",
)
# A backfill is one transaction; a range with more due times than this is refused
# rather than holding the write lock for an unbounded time.
BACKFILL_MAX = 1000


@dataclass(frozen=True)
class ScheduleSpec:
    """``cron`` (5 fields, or 6 with seconds last, croniter's syntax) or ``interval_ms``;
    ``timezone`` (IANA name) applies to cron; ``jitter_ms`` delays each firing by a
    deterministic amount in [0, jitter_ms) derived from the schedule id and due time."""

    cron: str = ""
    interval_ms: int = 0
    timezone: str = "UTC"
    jitter_ms: int = 0


def check_spec(spec: ScheduleSpec) -> None:
    if bool(spec.cron) == bool(spec.interval_ms):
        raise InvalidArgumentError("a schedule spec needs exactly one of cron or interval")
    if spec.interval_ms < 0 or spec.jitter_ms < 0:
        raise InvalidArgumentError("interval and jitter must not be negative")
    if spec.cron and not croniter.is_valid(spec.cron):
        raise InvalidArgumentError(f"invalid cron expression {spec.cron!r}")
    zone(spec.timezone)


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidArgumentError(f"unknown time zone {name!r}") from exc


def next_due(spec: ScheduleSpec, anchor_ms: int, after_ms: int) -> int:
    """The first due time strictly after ``after_ms``. Intervals count from ``anchor_ms``
    (the schedule's creation; the grid extends before it for backfills), so restarts and
    replicas agree on every due time."""
    if spec.interval_ms:
        steps = (after_ms - anchor_ms) // spec.interval_ms + 1
        return anchor_ms + steps * spec.interval_ms
    start = datetime.fromtimestamp(after_ms / 1000, tz=zone(spec.timezone))
    nxt = croniter(spec.cron, start).get_next(datetime)
    return int(nxt.timestamp() * 1000)


def due_times(spec: ScheduleSpec, anchor_ms: int, start_ms: int, end_ms: int) -> list[int]:
    """Every due time in [start_ms, end_ms] (a backfill's range)."""
    out: list[int] = []
    due = next_due(spec, anchor_ms, start_ms - 1)
    while due <= end_ms:
        out.append(due)
        if len(out) > BACKFILL_MAX:
            raise InvalidArgumentError(f"a backfill covers at most {BACKFILL_MAX} due times")
        due = next_due(spec, anchor_ms, due)
    return out


def jitter(schedule_id: str, due_ms: int, jitter_ms: int) -> int:
    if jitter_ms <= 0:
        return 0
    digest = hashlib.sha256(f"{schedule_id}\0{due_ms}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % jitter_ms


def run_workflow_id(schedule_id: str, due_ms: int) -> str:
    """The deterministic workflow id of a due time: the same due time always names the
    same workflow, so no retry, restart or replica can start it twice."""
    stamp = datetime.fromtimestamp(due_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{schedule_id}-{stamp[:-4]}Z"
