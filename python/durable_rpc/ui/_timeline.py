"""A run's history as a timeline: lanes of bars, drawn by the server as one SVG.

:func:`build_timeline` folds the events into :class:`Timeline`: the **run lane** (the run
from its start to its close, with a mark for each workflow task, signal, marker, update,
cancel request and every event kind without a lane of its own, including kinds this code
does not know), and one **lane** per activity, timer, child workflow and local activity
(keyed ``activity:<seq>``, ``timer:<seq>``, ``child:<seq>``, ``local_activity:<seq>``),
each with a bar from scheduled -> started -> closed in epoch milliseconds. A bar still open
reaches the timeline's ``now_ms``.

What the history records decides what a bar can show:

- an **activity** records when it was scheduled and how it closed, with the number of the
  attempt that closed it, but not when each attempt ran: a bar closed by attempt N carries
  N-1 failed attempts of unknown time (an attempt retried after a failure or a lost lease),
  drawn as marks at the bar's start; its final attempt is failed when the activity
  failed. An open activity's attempts are not in the history: build_timeline takes them
  from describe's pending activities when given (``pending=``);
- a **local activity** ran inside one workflow task (from the task's claim to its
  completion: the bar) and its marker's attempt log gives each attempt's outcome and
  duration; the attempts are drawn back to back from the bar's start (backoffs are not
  recorded), so their placement is approximate, their order and lengths are not;
- a **timer** runs from started to fired or cancelled, with a tick at its due time;
- a **child** runs from initiated to started to closed (or start failed).

:func:`render_timeline_svg` draws it: a time axis with UTC tick labels, a lane label
column, one ``<g class="bar">`` per lane item (``data-lane``/``data-kind``/``data-status``
and a ``<title>`` tooltip), failed attempts and failed final outcomes with class
``failed``. Zoom is the time range ``start_ms..end_ms``: bars are clipped to it, and lanes
with nothing in it are **hidden** (a note counts them). At most ``max_lanes`` lanes are
drawn; the rest collapse into one ``+N more`` lane that shows where their bars fall.
Every text is XML-escaped and the output depends only on the input (golden files compare
it byte for byte). A bad range or width raises :class:`TimelineError` (``reason``
INVALID_TIME_RANGE / INVALID_WIDTH) for the page to show.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_rpc import payload as codec
from durable_rpc.ui._values import duration_text, time_ms, time_text
from durable_rpc.v1 import history_pb2, service_pb2

#: Lane kinds.
ACTIVITY = "activity"
TIMER = "timer"
CHILD = "child"
LOCAL_ACTIVITY = "local_activity"

#: Failed attempts of unknown time drawn per bar (the last mark says how many more).
MAX_ATTEMPT_MARKS = 5


class TimelineError(ValueError):
    """A timeline cannot be drawn as asked (``reason``: a stable code)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Attempt:
    """One attempt of an activity or local activity."""

    number: int
    #: "completed", "failed", "timed_out", "cancelled" (the last attempt's outcome), or
    #: "failed" for an earlier attempt the history records only by count.
    outcome: str
    failed: bool
    #: None: the history does not record when the attempt ran.
    start_ms: int | None = None
    end_ms: int | None = None
    message: str = ""


@dataclass(frozen=True)
class Mark:
    """A point in time: an event of the run lane, or one inside a bar (a cancel request)."""

    event_id: int
    time_ms: int
    kind: str
    label: str


@dataclass(frozen=True)
class Bar:
    """One activity, timer, child or local activity: scheduled -> started -> closed."""

    lane: str
    kind: str
    scheduled_ms: int
    #: None: the history records no start (activities: attempts are not events).
    started_ms: int | None
    #: None: still open.
    closed_ms: int | None
    #: closed_ms, or while open the timeline's now_ms.
    end_ms: int
    #: completed, failed, cancelled, timed_out, terminated, start_failed, fired, open, or
    #: unresolved (still open when the run closed: it ended with the run).
    status: str
    #: The final outcome is a failure (failed, timed out, terminated, start failed).
    failed: bool
    attempts: tuple[Attempt, ...] = ()
    marks: tuple[Mark, ...] = ()
    #: A timer's due time.
    due_ms: int | None = None
    #: Attempt times placed from their durations (local activities).
    approximate: bool = False
    event_ids: tuple[int, ...] = ()
    #: The lane's label ("charge #3") and what else names the item (queue, child id,
    #: failure), for the tooltip.
    label: str = ""
    detail: str = ""

    @property
    def open(self) -> bool:
        return self.closed_ms is None

    @property
    def title(self) -> str:
        """The tooltip text (made when asked: a drawing shows only the lanes in range)."""
        return _bar_title(self)

    @property
    def failed_attempts(self) -> int:
        return sum(1 for a in self.attempts if a.failed)


@dataclass(frozen=True)
class Lane:
    key: str
    kind: str
    seq: int
    label: str
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Timeline:
    workflow_type: str
    workflow_id: str
    run_id: str
    #: The first event's time (the run's start); 0 for an empty history.
    start_ms: int
    #: The run's close (None: open).
    closed_ms: int | None
    #: How it closed ("running" while open).
    status: str
    #: The time open bars reach: build_timeline's now_ms, never before the last event.
    now_ms: int
    lanes: tuple[Lane, ...]
    #: The run lane's marks, in event order.
    marks: tuple[Mark, ...]
    events: int = 0
    #: The last event's time: the database clock had reached it, so no "now" is earlier.
    last_event_ms: int = 0

    @property
    def end_ms(self) -> int:
        return self.closed_ms if self.closed_ms is not None else max(self.now_ms, self.start_ms)


# -- building -------------------------------------------------------------------------------

_RUN_CLOSE = {
    "workflow_completed": "completed",
    "workflow_failed": "failed",
    "workflow_cancelled": "cancelled",
    "workflow_terminated": "terminated",
    "workflow_timed_out": "timed_out",
    "workflow_continued_as_new": "continued_as_new",
}

_CHILD_CLOSE = {
    "child_workflow_completed": "completed",
    "child_workflow_failed": "failed",
    "child_workflow_cancelled": "cancelled",
    "child_workflow_terminated": "terminated",
    "child_workflow_timed_out": "timed_out",
    "child_workflow_start_failed": "start_failed",
}

_FAILED_STATUSES = frozenset({"failed", "timed_out", "terminated", "start_failed"})


@dataclass
class _Open:
    """A lane item being folded from its events."""

    key: str
    kind: str
    seq: int
    name: str
    scheduled_ms: int
    started_ms: int | None = None
    closed_ms: int | None = None
    status: str = "open"
    attempts: list[Attempt] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    due_ms: int | None = None
    approximate: bool = False
    event_ids: list[int] = field(default_factory=list)
    detail: str = ""


def build_timeline(
    events: Sequence[history_pb2.HistoryEvent],
    *,
    now_ms: int | None = None,
    pending: Sequence[service_pb2.PendingActivity] = (),
) -> Timeline:
    """Fold ``events`` (a run's history, in order) into a :class:`Timeline`.

    ``pending`` (DescribeWorkflowResponse.pending_activities) adds what the history does
    not record of an open activity: its earlier attempts (failed) and the current one
    (queued, leased or waiting), with the last failure. An activity the history already
    closed, or does not know, takes nothing from it.

    Never raises on what a history holds: an event of a kind without a lane (or unknown
    to this code) is a run-lane mark, and a lane's later event without its first one (a
    partial history) opens the lane at its own time."""
    items: dict[str, _Open] = {}
    marks: list[Mark] = []
    started: Any = None
    closed_ms: int | None = None
    status = "running"
    task_start_ms: int | None = None
    last_ms = 0
    for event in events:
        when = time_ms(event.event_time)
        last_ms = max(last_ms, when)
        kind = event.WhichOneof("attributes")
        event_id = int(event.event_id)
        if kind is None:
            marks.append(
                Mark(event_id, when, "unknown", "an event of a kind this version does not know")
            )
            continue
        attrs = getattr(event, kind)
        if kind == "workflow_started":
            started = attrs
            marks.append(Mark(event_id, when, kind, "workflow started"))
        elif kind == "workflow_task_completed":
            task_start_ms = (
                time_ms(attrs.workflow_time) if attrs.HasField("workflow_time") else when
            )
            marks.append(Mark(event_id, when, kind, "workflow task completed"))
        elif kind in _RUN_CLOSE:
            closed_ms, status = when, _RUN_CLOSE[kind]
            marks.append(Mark(event_id, when, kind, f"workflow {status.replace('_', ' ')}"))
        elif kind.startswith("activity_"):
            _fold_activity(items, kind, attrs, event_id, when)
        elif kind.startswith("timer_"):
            _fold_timer(items, kind, attrs, event_id, when)
        elif kind.startswith("child_"):
            _fold_child(items, kind, attrs, event_id, when)
        elif kind == "marker_recorded" and attrs.kind == "local_activity":
            _fold_local(items, attrs, event_id, when, task_start_ms)
        else:
            marks.append(Mark(event_id, when, kind, _mark_label(kind, attrs)))
    # now_ms comes from the caller's clock, the events from the database's: a clock behind
    # must not end open bars before what the history already recorded.
    now = max(now_ms, last_ms) if now_ms is not None else last_ms
    first_ms = time_ms(events[0].event_time) if events else 0
    for activity in pending:
        item = items.get(f"{ACTIVITY}:{activity.seq}")
        if item is not None and item.closed_ms is None and closed_ms is None:
            _pending_attempts(item, activity)
    if closed_ms is not None:
        # The run's tasks ended with it: what was still open ends at its close.
        for item in items.values():
            if item.closed_ms is None:
                item.closed_ms, item.status = max(closed_ms, item.scheduled_ms), "unresolved"
    lanes = tuple(_lane(item, now) for item in items.values())
    return Timeline(
        workflow_type=started.workflow_type if started is not None else "",
        workflow_id=started.workflow_id if started is not None else "",
        run_id=started.run_id if started is not None else "",
        start_ms=first_ms,
        closed_ms=closed_ms,
        status=status,
        now_ms=max(now, first_ms),
        lanes=lanes,
        marks=tuple(marks),
        events=len(events),
        last_event_ms=last_ms,
    )


def _item(items: dict[str, _Open], kind: str, seq: int, when: int, name: str = "") -> _Open:
    key = f"{kind}:{seq}"
    item = items.get(key)
    if item is None:
        item = items[key] = _Open(key, kind, seq, name, when)
    return item


def _close(item: _Open, status: str, when: int, event_id: int) -> None:
    item.closed_ms, item.status = when, status
    item.event_ids.append(event_id)


#: What is known of an attempt the history records only by count.
_BY_COUNT = "failed or lost its lease and was retried"


def _earlier_attempts(item: _Open, last: int) -> None:
    # Attempts before the last one ended without an outcome in history: each failed or
    # lost its lease, and was retried. The history keeps only their count.
    for number in range(1, last):
        item.attempts.append(Attempt(number, "failed", True, message=_BY_COUNT))


def _pending_attempts(item: _Open, activity: service_pb2.PendingActivity) -> None:
    last = max(1, activity.attempt)
    _earlier_attempts(item, last)
    if last > 1 and activity.HasField("last_failure"):
        failure = activity.last_failure
        item.attempts[-1] = Attempt(
            last - 1, "failed", True, message=f"{failure.type}: {failure.message}"
        )
    state = activity.state or "pending"
    item.attempts.append(Attempt(last, state, False))
    who = f" by worker {activity.worker_id}" if activity.worker_id else ""
    item.detail += f"{'; ' if item.detail else ''}attempt {last} {state}{who}"


def _fold_activity(items: dict[str, _Open], kind: str, a: Any, event_id: int, when: int) -> None:
    if kind == "activity_scheduled":
        item = _item(items, ACTIVITY, a.seq, when, a.activity_type)
        item.name = a.activity_type
        item.detail = f"queue {a.task_queue}"
        item.event_ids.append(event_id)
        return
    item = _item(items, ACTIVITY, a.seq, when)
    if kind == "activity_completed":
        _earlier_attempts(item, a.attempt)
        item.attempts.append(Attempt(max(1, a.attempt), "completed", False, end_ms=when))
        _close(item, "completed", when, event_id)
    elif kind == "activity_failed":
        _earlier_attempts(item, a.attempt)
        message = f"{a.failure.type}: {a.failure.message}"
        outcome = "ambiguous" if a.ambiguous else "failed"
        item.attempts.append(
            Attempt(max(1, a.attempt), outcome, True, end_ms=when, message=message)
        )
        _close(item, "failed", when, event_id)
    elif kind == "activity_cancelled":
        if a.attempt:
            _earlier_attempts(item, a.attempt)
            item.attempts.append(Attempt(a.attempt, "cancelled", False, end_ms=when))
        _close(item, "cancelled", when, event_id)
    else:  # activity_cancel_requested, and any later activity_* kind
        item.marks.append(Mark(event_id, when, kind, kind.replace("_", " ")))
        item.event_ids.append(event_id)


def _fold_timer(items: dict[str, _Open], kind: str, a: Any, event_id: int, when: int) -> None:
    item = _item(items, TIMER, a.seq, when)
    if kind == "timer_started":
        duration_ms = int(a.duration.seconds) * 1000 + int(a.duration.nanos) // 1_000_000
        item.started_ms = when
        item.due_ms = when + duration_ms
        item.name = f"timer {duration_text(duration_ms)}"
        item.event_ids.append(event_id)
    elif kind == "timer_fired":
        _close(item, "fired", when, event_id)
    elif kind == "timer_cancelled":
        _close(item, "cancelled", when, event_id)
    else:
        item.marks.append(Mark(event_id, when, kind, kind.replace("_", " ")))
        item.event_ids.append(event_id)


def _fold_child(items: dict[str, _Open], kind: str, a: Any, event_id: int, when: int) -> None:
    item = _item(items, CHILD, a.seq, when)
    if kind == "child_workflow_initiated":
        item.name = a.workflow_type
        item.detail = f"id {a.workflow_id}"
        item.event_ids.append(event_id)
    elif kind == "child_workflow_started":
        item.started_ms = when
        item.event_ids.append(event_id)
    elif kind in _CHILD_CLOSE:
        _close(item, _CHILD_CLOSE[kind], when, event_id)
        if kind == "child_workflow_start_failed":
            item.detail += f"; {a.reason}: {a.message}"
        elif "failure" in a.DESCRIPTOR.fields_by_name and a.HasField("failure"):
            item.detail += f"; {a.failure.type}: {a.failure.message}"
    else:  # child_cancel_requested, and any later child_* kind
        item.marks.append(Mark(event_id, when, kind, kind.replace("_", " ")))
        item.event_ids.append(event_id)


def _fold_local(
    items: dict[str, _Open], a: Any, event_id: int, when: int, task_start_ms: int | None
) -> None:
    start = task_start_ms if task_start_ms is not None and task_start_ms <= when else when
    item = _item(items, LOCAL_ACTIVITY, a.seq, start, "local activity")
    item.started_ms = start
    failed = a.id == "failed"
    log = _attempt_log(a.details.data) if a.HasField("details") else []
    cursor = start
    for index, entry in enumerate(log):
        duration = entry.get("duration_ms")
        length = duration if isinstance(duration, int) and duration >= 0 else 0
        begin, cursor = cursor, min(when, cursor + length)
        outcome = str(entry.get("outcome", "completed"))
        message = ""
        if entry.get("type") or entry.get("message"):
            message = f"{entry.get('type', '')}: {entry.get('message', '')}"
        attempt = entry.get("attempt")
        item.attempts.append(
            Attempt(
                attempt if isinstance(attempt, int) else index + 1,
                outcome,
                outcome != "completed",
                start_ms=begin,
                end_ms=cursor,
                message=message,
            )
        )
    item.approximate = bool(log)
    if failed and not log:
        item.attempts.append(Attempt(1, "failed", True, start_ms=start, end_ms=when))
    _close(item, "failed" if failed else "completed", when, event_id)


def _attempt_log(data: bytes) -> list[dict[str, Any]]:
    """A local activity marker's attempt log; [] when it does not decode as one."""
    try:
        value = codec.decode(data)
    except codec.PayloadError:
        return []
    if not isinstance(value, list):
        return []
    return [entry for entry in value if isinstance(entry, dict)]


def _mark_label(kind: str, a: Any) -> str:
    if kind == "signal_received":
        return f"signal {a.signal_name}"
    if kind == "marker_recorded":
        return f"{a.kind} marker {a.id}".replace("  ", " ").strip()
    if kind == "update_accepted":
        return f"update {a.update_name} accepted"
    if kind == "external_signal_initiated":
        return f"signal {a.signal_name} sent to {a.workflow_id}"
    return kind.replace("_", " ")


def _lane(item: _Open, now_ms: int) -> Lane:
    end = item.closed_ms if item.closed_ms is not None else max(now_ms, item.scheduled_ms)
    label = f"{item.name or item.kind.replace('_', ' ')} #{item.seq}"
    bar = Bar(
        lane=item.key,
        kind=item.kind,
        scheduled_ms=item.scheduled_ms,
        started_ms=item.started_ms,
        closed_ms=item.closed_ms,
        end_ms=end,
        status=item.status,
        failed=item.status in _FAILED_STATUSES,
        attempts=tuple(item.attempts),
        marks=tuple(item.marks),
        due_ms=item.due_ms,
        approximate=item.approximate,
        event_ids=tuple(item.event_ids),
        label=label,
        detail=item.detail,
    )
    return Lane(item.key, item.kind, item.seq, label, (bar,))


def _bar_title(item: Bar) -> str:
    kind, end = item.kind.replace("_", " "), item.end_ms
    lines = [f"{kind} {item.label}" if item.kind != TIMER else item.label]
    if item.detail:
        lines.append(item.detail)
    lines.append(f"scheduled {time_text(item.scheduled_ms)}")
    if item.started_ms is not None and item.started_ms != item.scheduled_ms:
        lines.append(f"started {time_text(item.started_ms)}")
    if item.due_ms is not None:
        lines.append(f"due {time_text(item.due_ms)}")
    if item.closed_ms is None:
        lines.append(f"still open after {duration_text(end - item.scheduled_ms)}")
    elif item.status == "unresolved":
        lines.append(f"not resolved when the run closed, {time_text(item.closed_ms)}")
    else:
        status = item.status.replace("_", " ")
        lines.append(
            f"{status} {time_text(item.closed_ms)} ({duration_text(end - item.scheduled_ms)})"
        )
    earlier = sum(1 for a in item.attempts if a.message == _BY_COUNT)
    if item.attempts:
        last = item.attempts[-1]
        lines.append(f"{len(item.attempts)} attempt(s); the last {last.outcome.replace('_', ' ')}")
    if earlier:
        lines.append(f"{earlier} earlier attempt(s) failed; the history does not record when")
    if item.approximate:
        lines.append("attempts placed from their durations (backoffs not recorded)")
    # Attempts with a known outcome (not the earlier ones known only by count).
    recorded = [a for a in item.attempts if a.message and a.message != _BY_COUNT]
    for attempt in recorded[-MAX_ATTEMPT_MARKS:]:
        lines.append(f"attempt {attempt.number}: {attempt.message}")
    return "\n".join(lines)


# -- drawing --------------------------------------------------------------------------------

_ROW = 22
_BAR_H = 12
_AXIS_H = 34
_PAD_R = 14
_NOTE_H = 18
_MIN_WIDTH = 320
_MAX_WIDTH = 20_000
# A word of label takes about this many pixels at font-size 11.
_CHAR_W = 6.4
# Run-lane marks of one kind closer than this merge into one.
_MERGE_PX = 4

#: Tick steps, in ms: the smallest that leaves about 90 px between labels is used.
_STEPS = (
    1, 2, 5, 10, 20, 50, 100, 200, 500,
    1_000, 2_000, 5_000, 10_000, 15_000, 30_000,
    60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000,
    3_600_000, 7_200_000, 10_800_000, 21_600_000, 43_200_000,
    86_400_000, 172_800_000, 604_800_000, 2_592_000_000, 31_536_000_000,
)  # fmt: skip

_STYLE = (
    ".dr-timeline{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;font-size:11px}"
    ".dr-timeline .tick text,.dr-timeline .note,.dr-timeline .range{fill:#444}"
    ".dr-timeline .grid{stroke:#e3e3e3;stroke-width:1}"
    ".dr-timeline .axis-line{stroke:#888;stroke-width:1}"
    ".dr-timeline .label{fill:#222}"
    ".dr-timeline .band{fill:transparent}"
    ".dr-timeline .lane:nth-of-type(even) .band{fill:#000;fill-opacity:.035}"
    ".dr-timeline .segment{fill:#3b73c4}"
    ".dr-timeline .waiting{fill:#a9c1e6}"
    ".dr-timeline .status-completed .segment,.dr-timeline .status-fired .segment{fill:#2f8a4e}"
    ".dr-timeline .status-cancelled .segment{fill:#8a8f98}"
    ".dr-timeline .status-unresolved .segment{fill:#c3c8cf}"
    ".dr-timeline .open .segment{fill:#3b73c4;fill-opacity:.55;stroke:#3b73c4;"
    "stroke-dasharray:3 2}"
    ".dr-timeline .failed{fill:#c62828}"
    ".dr-timeline .attempt{fill:#2f8a4e}"
    ".dr-timeline .attempt.failed{fill:#c62828}"
    ".dr-timeline .due{stroke:#b26a00;stroke-width:2}"
    ".dr-timeline .mark{fill:#555}"
    ".dr-timeline .mark.signal_received,.dr-timeline .mark.cancel_requested{fill:#7b3fb5}"
    ".dr-timeline .mark.workflow_task_completed{stroke:#9aa3ad;stroke-width:1}"
    ".dr-timeline .run .segment{fill:#cfd8e6}"
    ".dr-timeline .run.status-failed .segment,.dr-timeline .run.status-timed_out .segment,"
    ".dr-timeline .run.status-terminated .segment{fill:#f1c4c4}"
    ".dr-timeline .density{fill:#3b73c4}"
    ".dr-timeline .bar:hover .segment{stroke:#000;stroke-width:1}"
)

_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _esc(text: str) -> str:
    """Text safe inside an XML element or a quoted attribute: markup escaped, and the
    control characters XML 1.0 cannot hold replaced (they would break the document)."""
    return html.escape(_INVALID_XML.sub("\ufffd", text), quote=True)


def _num(x: float) -> str:
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def render_timeline_svg(
    timeline: Timeline,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
    now_ms: int | None = None,
    width: int = 1100,
    max_lanes: int = 100,
) -> str:
    """The timeline as a complete, self-contained ``<svg>`` document (see the module
    docstring). ``start_ms``/``end_ms`` zoom (default: the whole run); ``now_ms`` moves
    the end of open bars (default: the timeline's now_ms)."""
    if not isinstance(width, int) or not _MIN_WIDTH <= width <= _MAX_WIDTH:
        raise TimelineError("INVALID_WIDTH", f"width must be {_MIN_WIDTH}..{_MAX_WIDTH} pixels")
    if max_lanes < 1:
        raise TimelineError("INVALID_LANE_CAP", "max_lanes must be at least 1")
    now = max(now_ms, timeline.last_event_ms) if now_ms is not None else timeline.now_ms
    run_end = timeline.closed_ms if timeline.closed_ms is not None else max(now, timeline.start_ms)
    lo = start_ms if start_ms is not None else timeline.start_ms
    hi = end_ms if end_ms is not None else run_end
    if start_ms is None and end_ms is not None and hi <= lo:
        lo = hi - 1
    if end_ms is None and start_ms is not None and hi <= lo:
        hi = lo + 1
    if start_ms is None and end_ms is None and hi <= lo:
        hi = lo + 1  # an instant: everything in one millisecond
    if hi <= lo:
        raise TimelineError(
            "INVALID_TIME_RANGE", "the time range must end after it starts (start_ms < end_ms)"
        )
    return _Drawing(timeline, lo, hi, now, width, max_lanes).svg()


class _Drawing:
    def __init__(
        self, timeline: Timeline, lo: int, hi: int, now: int, width: int, max_lanes: int
    ) -> None:
        self.t = timeline
        self.lo, self.hi, self.now = lo, hi, now
        self.width = width
        self.label_w = int(min(220, width * 0.28))
        self.x0 = self.label_w + 8
        self.plot_w = width - self.x0 - _PAD_R
        self.max_lanes = max_lanes

    def x(self, ms: float) -> float:
        return self.x0 + (ms - self.lo) / (self.hi - self.lo) * self.plot_w

    def clip(self, a: int, b: int) -> tuple[float, float] | None:
        """The x span of [a, b] inside the range (at least 2 px wide), or None."""
        if b < self.lo or a > self.hi:
            return None
        left = self.x(max(a, self.lo))
        right = self.x(min(b, self.hi))
        if right - left < 2:
            right = min(left + 2, self.x0 + self.plot_w)
            left = right - 2
        return left, right

    def end_of(self, bar: Bar) -> int:
        return bar.closed_ms if bar.closed_ms is not None else max(self.now, bar.scheduled_ms)

    def svg(self) -> str:
        visible = [lane for lane in self.t.lanes if self._in_range(lane)]
        hidden_out = len(self.t.lanes) - len(visible)
        shown, collapsed = visible[: self.max_lanes], visible[self.max_lanes :]
        rows = 1 + len(shown) + (1 if collapsed else 0)
        notes = self._notes(hidden_out)
        height = _AXIS_H + rows * _ROW + len(notes) * _NOTE_H + 6
        out: list[str] = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="dr-timeline" width="{self.width}" '
            f'height="{height}" viewBox="0 0 {self.width} {height}" role="img" '
            f'data-start-ms="{self.lo}" data-end-ms="{self.hi}">',
            f"<title>{_esc(self._caption())}</title>",
            f"<style>{_STYLE}</style>",
        ]
        out.extend(self._axis(height - len(notes) * _NOTE_H - 6))
        y = _AXIS_H
        out.extend(self._run_lane(y))
        for lane in shown:
            y += _ROW
            out.extend(self._lane(lane, y))
        if collapsed:
            y += _ROW
            out.extend(self._more(collapsed, y))
        y += _ROW
        for note in notes:
            y += _NOTE_H
            out.append(f'<text class="note" x="4" y="{y - 5}">{_esc(note)}</text>')
        out.append("</svg>")
        return "\n".join(out) + "\n"

    def _in_range(self, lane: Lane) -> bool:
        return any(b.scheduled_ms <= self.hi and self.end_of(b) >= self.lo for b in lane.bars)

    def _caption(self) -> str:
        name = self.t.workflow_type or "workflow"
        run = f" run {self.t.run_id}" if self.t.run_id else ""
        return (
            f"Timeline of {name}{run}: {len(self.t.lanes)} lanes, "
            f"{time_text(self.lo)} to {time_text(self.hi)} UTC"
        )

    def _notes(self, hidden_out: int) -> list[str]:
        notes = []
        if not self.t.events:
            notes.append("The history has no events yet.")
        if hidden_out:
            notes.append(f"{hidden_out} lane(s) with nothing in this time range are hidden.")
        return notes

    # The axis: tick labels on top, grid lines down through the lanes.
    def _axis(self, bottom: int) -> Iterator[str]:
        span = self.hi - self.lo
        step = next(
            (s for s in _STEPS if s / span * self.plot_w >= _tick_room(s)),
            _STEPS[-1],
        )
        yield '<g class="axis">'
        yield (
            f'<text class="range" x="4" y="12">UTC {_esc(time_text(self.lo))} to '
            f"{_esc(time_text(self.hi))} ({_esc(duration_text(span))})</text>"
        )
        yield (
            f'<line class="axis-line" x1="{self.x0}" y1="{_AXIS_H - 2}" '
            f'x2="{self.x0 + self.plot_w}" y2="{_AXIS_H - 2}"/>'
        )
        tick = math.ceil(self.lo / step) * step
        while tick <= self.hi:
            at = self.x(tick)
            x = _num(at)
            # A label at the right edge ends there instead of running off the drawing.
            anchor = "end" if at > self.width - 45 else "middle"
            yield (
                f'<g class="tick"><line class="grid" x1="{x}" y1="{_AXIS_H - 6}" x2="{x}" '
                f'y2="{bottom}"/><text x="{x}" y="{_AXIS_H - 9}" text-anchor="{anchor}">'
                f"{_esc(_tick_label(tick, step))}</text></g>"
            )
            tick += step
        yield "</g>"

    def _label(self, text: str, y: int) -> str:
        room = max(4, int(self.label_w / _CHAR_W))
        short = text if len(text) <= room else text[: room - 1] + "\u2026"
        return (
            f'<text class="label" x="4" y="{y + _ROW // 2 + 4}">{_esc(short)}'
            f"<title>{_esc(text)}</title></text>"
        )

    def _band(self, y: int) -> str:
        return f'<rect class="band" x="0" y="{y}" width="{self.width}" height="{_ROW}"/>'

    def _run_lane(self, y: int) -> Iterator[str]:
        t = self.t
        status = t.status if t.closed_ms is not None else "running"
        yield f'<g class="lane run-lane" data-lane="run" data-kind="run" data-status="{status}">'
        yield self._band(y)
        yield self._label("run", y)
        run_end = t.closed_ms if t.closed_ms is not None else max(self.now, t.start_ms)
        span = self.clip(t.start_ms, run_end) if t.events else None
        top = y + (_ROW - _BAR_H) // 2
        if span is not None:
            title = f"run {status.replace('_', ' ')}, {time_text(t.start_ms)}"
            title += f" to {time_text(run_end)} ({duration_text(run_end - t.start_ms)})"
            yield (
                f'<g class="bar run status-{_esc(status)}{"" if t.closed_ms else " open"}" '
                f'data-lane="run" data-kind="run" data-status="{_esc(status)}">'
                f"<title>{_esc(title)}</title>"
                f'<rect class="segment" x="{_num(span[0])}" y="{top}" '
                f'width="{_num(span[1] - span[0])}" height="{_BAR_H}"/></g>'
            )
        yield from self._marks(t.marks, top)
        yield "</g>"

    def _marks(self, marks: Sequence[Mark], top: int) -> Iterator[str]:
        in_range = [m for m in marks if self.lo <= m.time_ms <= self.hi]
        # Workflow tasks are the most frequent events and the least telling: one path of
        # ticks for all of them keeps a run of 1,000 tasks a few kilobytes.
        tasks = [m for m in in_range if m.kind == "workflow_task_completed"]
        if tasks:
            columns = sorted({round(self.x(m.time_ms)) for m in tasks})
            ticks = "".join(f"M{x} {top - 2}v{_BAR_H + 4}" for x in columns)
            yield (
                f'<g class="mark workflow_task_completed" data-kind="workflow_task_completed" '
                f'data-count="{len(tasks)}"><title>{len(tasks)} workflow task(s) completed'
                f'</title><path d="{ticks}"/></g>'
            )
        # Other marks of one kind within a few pixels merge, each naming how many it is.
        groups: dict[tuple[int, str], list[Mark]] = {}
        for mark in in_range:
            if mark.kind != "workflow_task_completed":
                column = round(self.x(mark.time_ms) / _MERGE_PX)
                groups.setdefault((column, mark.kind), []).append(mark)
        for (_, kind), group in groups.items():
            first = group[0]
            if len(group) == 1:
                title = f"{first.label} (event {first.event_id}, {time_text(first.time_ms)})"
            else:
                title = f"{len(group)} events from {first.event_id}: {first.label}, ..."
            cls = _esc(kind)
            cx, cy, r = round(self.x(first.time_ms)), top + _BAR_H // 2, 4
            yield (
                f'<g class="mark {cls}" data-kind="{cls}" data-event-id="{first.event_id}" '
                f'data-count="{len(group)}"><title>{_esc(title)}</title>'
                f'<path d="M{cx} {cy - r}L{cx + r} {cy}L{cx} {cy + r}L{cx - r} {cy}Z"/></g>'
            )

    def _lane(self, lane: Lane, y: int) -> Iterator[str]:
        key, kind = _esc(lane.key), _esc(lane.kind)
        yield f'<g class="lane" data-lane="{key}" data-kind="{kind}">'
        yield self._band(y)
        yield self._label(lane.label, y)
        top = y + (_ROW - _BAR_H) // 2
        for bar in lane.bars:
            yield from self._bar(bar, top)
        yield "</g>"

    def _bar(self, bar: Bar, top: int) -> Iterator[str]:
        end = self.end_of(bar)
        span = self.clip(bar.scheduled_ms, end)
        if span is None:
            return
        classes = ["bar", f"status-{bar.status}"]
        if bar.open:
            classes.append("open")
        clipped = ("left" if bar.scheduled_ms < self.lo else "") + (
            "right" if end > self.hi else ""
        )
        attrs = (
            f'class="{_esc(" ".join(classes))}" data-lane="{_esc(bar.lane)}" '
            f'data-kind="{_esc(bar.kind)}" data-status="{_esc(bar.status)}"'
        )
        if clipped:
            attrs += f' data-clipped="{"both" if clipped == "leftright" else clipped}"'
        title = bar.title
        if bar.open and end != bar.end_ms:
            title += f"\n(open: drawn to {time_text(end)})"
        yield f"<g {attrs}><title>{_esc(title)}</title>"
        # Waiting (scheduled, not started: a child before its start) is lighter.
        started = bar.started_ms
        if started is not None and started > bar.scheduled_ms:
            wait = self.clip(bar.scheduled_ms, min(started, end))
            if wait is not None:
                yield self._rect("waiting", wait, top)
            run = self.clip(started, end)
            if run is not None:
                yield self._rect("segment" + (" failed" if bar.failed else ""), run, top)
        else:
            yield self._rect("segment" + (" failed" if bar.failed else ""), span, top)
        yield from self._attempts(bar, span, top)
        if bar.due_ms is not None and self.lo <= bar.due_ms <= self.hi:
            x = _num(self.x(bar.due_ms))
            yield f'<line class="due" x1="{x}" y1="{top - 3}" x2="{x}" y2="{top + _BAR_H + 3}"/>'
        yield from self._marks(bar.marks, top)
        yield "</g>"

    def _rect(self, cls: str, span: tuple[float, float], top: int, h: int = _BAR_H) -> str:
        return (
            f'<rect class="{cls}" x="{_num(span[0])}" y="{top}" '
            f'width="{_num(span[1] - span[0])}" height="{h}"/>'
        )

    def _attempts(self, bar: Bar, span: tuple[float, float], top: int) -> Iterator[str]:
        # Earlier attempts known only by count (a final failed attempt is the bar itself).
        unknown = [a for a in bar.attempts if a.failed and a.start_ms is None and a.end_ms is None]
        for index, attempt in enumerate(unknown[:MAX_ATTEMPT_MARKS]):
            # No time recorded: a notch at the bar's start stands for the attempt.
            x = span[0] + 1 + index * 6
            more = len(unknown) - MAX_ATTEMPT_MARKS
            title = f"attempt {attempt.number} {attempt.message}"
            if index == MAX_ATTEMPT_MARKS - 1 and more > 0:
                title += f" (and {more} more failed attempts)"
            yield (
                f'<rect class="attempt failed" data-attempt="{attempt.number}" x="{_num(x)}" '
                f'y="{top - 2}" width="4" height="{_BAR_H + 4}"><title>{_esc(title)}</title></rect>'
            )
        for attempt in bar.attempts:
            if attempt.start_ms is None or attempt.end_ms is None:
                continue  # by count only (above), or the final one: the bar shows it
            at = self.clip(attempt.start_ms, attempt.end_ms)
            if at is None:
                continue
            cls = "attempt failed" if attempt.failed else "attempt"
            text = f"attempt {attempt.number} {attempt.outcome.replace('_', ' ')}"
            if attempt.message:
                text += f": {attempt.message}"
            if attempt.end_ms is not None and attempt.start_ms is not None:
                text += f" ({duration_text(attempt.end_ms - attempt.start_ms)})"
            yield (
                f'<rect class="{cls}" data-attempt="{attempt.number}" x="{_num(at[0])}" '
                f'y="{top + 3}" width="{_num(at[1] - at[0])}" height="{_BAR_H - 6}">'
                f"<title>{_esc(text)}</title></rect>"
            )

    def _more(self, lanes: Sequence[Lane], y: int) -> Iterator[str]:
        # The collapsed lanes' bars as a density strip: where the rest of the work is.
        buckets = max(1, min(200, int(self.plot_w // 4)))
        counts = [0] * buckets
        for lane in lanes:
            for bar in lane.bars:
                span = self.clip(bar.scheduled_ms, self.end_of(bar))
                if span is None:
                    continue
                first = int((span[0] - self.x0) / self.plot_w * buckets)
                last = int((span[1] - self.x0) / self.plot_w * buckets)
                for i in range(max(0, first), min(buckets - 1, last) + 1):
                    counts[i] += 1
        yield (f'<g class="lane more" data-lane="more" data-kind="more" data-count="{len(lanes)}">')
        yield self._band(y)
        yield (
            f'<text class="label" x="4" y="{y + _ROW // 2 + 4}">+{len(lanes)} more'
            f"<title>{len(lanes)} more lanes: narrow the time range to see them</title></text>"
        )
        peak = max(counts) or 1
        width = self.plot_w / buckets
        for i, count in enumerate(counts):
            if count:
                x = self.x0 + i * width
                yield (
                    f'<rect class="density" x="{_num(x)}" y="{y + 4}" width="{_num(width)}" '
                    f'height="{_ROW - 8}" fill-opacity="{count / peak:.2f}"/>'
                )
        yield "</g>"


def _tick_room(step: int) -> float:
    """Pixels between two ticks of ``step``: their labels' width and a gap."""
    return len(_tick_label(step, step)) * _CHAR_W + 24


def _tick_label(ms: int, step: int) -> str:
    text = time_text(ms)  # YYYY-MM-DD HH:MM:SS.mmm
    if step < 1000:
        return text[11:]
    if step < 60_000:
        return text[11:19]
    if step < 86_400_000:
        return text[11:16] if ms % 86_400_000 else text[5:16]
    return text[:10]
