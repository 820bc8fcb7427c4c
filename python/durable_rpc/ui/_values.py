"""Values and events as an operator reads them on the run page.

:func:`payload_text` turns one of our payloads into indented, JSON-like text and never
raises: an external reference, an encrypted payload or a malformed frame is *described*,
never decoded blindly; a compressed one is shown decompressed (``codec.readable``).
:func:`event_summary` turns one history event into an :class:`EventView` (kind, id, time,
a one-line summary, its decoded payload fields and its failure), for the full event list
beside the timeline.

The text is plain (not HTML): the templates escape it. Summaries cap user-chosen names
(workflow types, signal names, ids) so a hostile name cannot blow up one line.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from durable_rpc import payload as codec
from durable_rpc.codec import readable
from durable_rpc.v1 import history_pb2, payload_pb2

#: Raw bytes shown of a bytes value (base64 of the first ones, then "...").
BYTES_PREVIEW = 48
#: Longest user-chosen name a one-line summary shows whole.
NAME_LIMIT = 80
#: Deepest Failure.cause chain shown (a history could hold a pathological one).
CAUSE_DEPTH = 16
_INDENT = "  "
_FRAME_MAGIC = b"\xc3\x01"


class _Full(Exception):
    """The text reached its limit: stop rendering."""


class _Writer:
    def __init__(self, limit: int) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.limit = limit

    def write(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size > self.limit:
            raise _Full

    def room(self) -> int:
        return max(0, self.limit - self.size)


def payload_text(payload: payload_pb2.Payload | None, *, limit: int = 4096) -> str:
    """The value ``payload`` holds as indented JSON-like text, at most ``limit``
    characters of it (then a note says it was cut). Bytes show as a base64 preview.

    Never raises: no payload -> ``"(none)"``; an external reference, a payload with codec
    metadata or a frame that does not decode -> a description in angle brackets."""
    limit = max(64, limit)
    if payload is None:
        return "(none)"
    if payload.HasField("external"):
        ref = payload.external
        digest = ref.sha256.hex()[:16]
        return f"<external payload: {ref.size} bytes, sha256 {digest}..., not fetched>"
    if payload.metadata:
        # A payload codec wrote these bytes, not a plain Value frame. The UI holds no
        # keys: it undoes compression and names what it cannot undo, never guessing.
        shown = readable(payload)
        if isinstance(shown, str):
            return shown
        payload = shown
    data = payload.data
    if not data:
        return "(none)"
    if not data.startswith(_FRAME_MAGIC):
        return f"<undecodable payload: {len(data)} bytes>"
    try:
        value = codec.decode(data)
    except (codec.PayloadError, RecursionError, MemoryError):
        return f"<undecodable payload: {len(data)} bytes>"
    return value_text(value, limit=limit)


def value_text(value: Any, *, limit: int = 4096) -> str:
    """A decoded Value as indented JSON-like text, cut at ``limit`` characters."""
    writer = _Writer(limit)
    try:
        _write_value(writer, value, 0)
    except _Full:
        text = "".join(writer.parts)[:limit]
        return f"{text}\n... (truncated at {limit} characters)"
    return "".join(writer.parts)


def _write_value(out: _Writer, value: Any, depth: int) -> None:
    if value is None:
        out.write("null")
    elif value is True or value is False:
        out.write("true" if value else "false")
    elif isinstance(value, int):
        out.write(str(value))
    elif isinstance(value, float):
        out.write(repr(value) if math.isfinite(value) else str(value))
    elif isinstance(value, str):
        # Cut before escaping: a 100 MB string costs only what is shown.
        out.write(json.dumps(value[: out.room() + 1], ensure_ascii=False))
    elif isinstance(value, bytes):
        out.write(bytes_text(value))
    elif isinstance(value, list):
        _write_items(out, value, depth, "[", "]", lambda item: _write_value(out, item, depth + 1))
    elif isinstance(value, dict):

        def entry(item: tuple[Any, Any]) -> None:
            out.write(json.dumps(str(item[0])[: out.room() + 1], ensure_ascii=False) + ": ")
            _write_value(out, item[1], depth + 1)

        _write_items(out, list(value.items()), depth, "{", "}", entry)
    else:  # not a Value type; shown rather than refused
        out.write(json.dumps(repr(value)[: out.room() + 1]))


def _write_items(
    out: _Writer,
    items: Sequence[Any],
    depth: int,
    open_: str,
    close: str,
    write_item: Callable[[Any], None],
) -> None:
    if not items:
        out.write(open_ + close)
        return
    inner = _INDENT * (depth + 1)
    out.write(open_)
    for index, item in enumerate(items):
        out.write(("," if index else "") + "\n" + inner)
        write_item(item)
    out.write("\n" + _INDENT * depth + close)


def bytes_text(data: bytes) -> str:
    """``<bytes N: base64 ...>``: the length and a base64 preview of the first bytes."""
    preview = base64.b64encode(data[:BYTES_PREVIEW]).decode()
    more = "..." if len(data) > BYTES_PREVIEW else ""
    return f"<bytes {len(data)}: base64 {preview}{more}>"


# -- time and duration text, shared with the timeline ------------------------------------


def time_ms(timestamp: Any) -> int:
    """A protobuf Timestamp as epoch milliseconds."""
    return int(timestamp.seconds) * 1000 + int(timestamp.nanos) // 1_000_000


def time_text(ms: int) -> str:
    """Epoch milliseconds as ``YYYY-MM-DD HH:MM:SS.mmm`` (UTC)."""
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def duration_text(ms: int) -> str:
    """A duration in the largest two units that matter: ``250ms``, ``1.5s``, ``2m 5s``,
    ``3h 20m``, ``2d 4h``."""
    if ms < 0:
        return "-" + duration_text(-ms)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        seconds = ms / 1000
        return f"{seconds:.1f}s".replace(".0s", "s")
    units = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))
    for index, (name, size) in enumerate(units[:-1]):
        if ms >= size:
            sub_name, sub_size = units[index + 1]
            whole, rest = divmod(ms, size)
            sub = rest // sub_size
            return f"{whole}{name} {sub}{sub_name}" if sub else f"{whole}{name}"
    raise AssertionError("unreachable")  # pragma: no cover


# -- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailureView:
    """A Failure as shown: type, message, stack trace, details and its cause chain."""

    type: str
    message: str
    stack_trace: str
    non_retryable: bool
    details: str | None
    cause: FailureView | None

    @property
    def line(self) -> str:
        """``Type: message`` (and its causes), on one line."""
        line = f"{self.type or 'Error'}: {_one_line(self.message)}"
        return f"{line} (caused by {self.cause.line})" if self.cause else line


@dataclass(frozen=True)
class EventView:
    """One history event as the event list shows it."""

    event_id: int
    #: The event's kind: its oneof field name (``activity_scheduled``), or ``unknown``
    #: for an event kind this code does not know (a newer server's).
    kind: str
    time_ms: int
    time: str
    summary: str
    #: The workflow seq the event belongs to (activities, timers, children...), if any.
    seq: int | None
    #: The timeline lane the event belongs to (``activity:3``, ``timer:2``, ``child:4``,
    #: ``local_activity:5``); None: the run lane.
    lane: str | None
    #: (field path, text) of each payload the event holds, decoded, and of its search
    #: attributes with their values.
    payloads: tuple[tuple[str, str], ...]
    failure: FailureView | None


def failure_view(failure: payload_pb2.Failure, *, limit: int = 4096) -> FailureView:
    return _failure_view(failure, limit, 0)


def _failure_view(failure: payload_pb2.Failure, limit: int, depth: int) -> FailureView:
    cause = None
    if failure.HasField("cause") and depth < CAUSE_DEPTH:
        cause = _failure_view(failure.cause, limit, depth + 1)
    return FailureView(
        type=failure.type,
        message=failure.message,
        stack_trace=failure.stack_trace,
        non_retryable=failure.non_retryable,
        details=payload_text(failure.details, limit=limit) if failure.HasField("details") else None,
        cause=cause,
    )


def event_summaries(
    events: Sequence[history_pb2.HistoryEvent],
    *,
    start: int = 0,
    stop: int | None = None,
    limit: int = 4096,
) -> list[EventView]:
    """The views of ``events[start:stop]``, in order (a page of a long history); later
    events of an activity, child or external signal are named after the command that
    started them (``activity charge completed``), on whichever page that command is."""
    names: dict[int, str] = {}
    views = []
    for index, event in enumerate(events[:stop]):
        kind = event.WhichOneof("attributes")
        if kind in _NAMING:
            attrs = getattr(event, kind)
            names[int(attrs.seq)] = str(getattr(attrs, _NAMING[kind]))
        if index >= start:
            views.append(event_summary(event, names=names, limit=limit))
    return views


#: The command events that name a seq, and the field holding the name.
_NAMING = {
    "activity_scheduled": "activity_type",
    "child_workflow_initiated": "workflow_type",
    "external_signal_initiated": "signal_name",
    "budget_reservation_requested": "budget",
}


def event_summary(
    event: history_pb2.HistoryEvent,
    *,
    names: Mapping[int, str] | None = None,
    limit: int = 4096,
) -> EventView:
    """One event's view. ``names`` maps a seq to the name its command gave it (see
    :func:`event_summaries`); without it later events say ``activity seq 3``.

    Never raises on an event of a kind it does not know: it gets a generic summary."""
    kind = event.WhichOneof("attributes") or "unknown"
    attrs: Message | None = getattr(event, kind) if kind != "unknown" else None
    seq = _seq_of(attrs)
    failure = None
    fields = attrs.DESCRIPTOR.fields_by_name if attrs is not None else {}
    if attrs is not None and "failure" in fields and attrs.HasField("failure"):
        failure = failure_view(attrs.failure, limit=limit)  # type: ignore[attr-defined]
    summarize = _SUMMARIES.get(kind)
    if attrs is None:
        summary = "an event of a kind this version does not know"
    elif summarize is None:
        summary = kind.replace("_", " ")
    else:
        summary = summarize(attrs, _Names(names or {}, seq))
    when = time_ms(event.event_time)
    return EventView(
        event_id=int(event.event_id),
        kind=kind,
        time_ms=when,
        time=time_text(when),
        summary=summary,
        seq=seq,
        lane=lane_of(event),
        payloads=tuple(_value_fields(attrs, limit)),
        failure=failure,
    )


def lane_of(event: history_pb2.HistoryEvent) -> str | None:
    """The timeline lane key of an event (see :attr:`EventView.lane`)."""
    kind = event.WhichOneof("attributes")
    if kind is None:
        return None
    if kind.startswith("activity_"):
        return f"activity:{getattr(event, kind).seq}"
    if kind.startswith("timer_"):
        return f"timer:{getattr(event, kind).seq}"
    if kind.startswith("child_"):
        return f"child:{getattr(event, kind).seq}"
    if kind == "marker_recorded" and event.marker_recorded.kind == "local_activity":
        return f"local_activity:{event.marker_recorded.seq}"
    return None


def _seq_of(attrs: Message | None) -> int | None:
    if attrs is None or "seq" not in attrs.DESCRIPTOR.fields_by_name:
        return None
    seq = int(attrs.seq)  # type: ignore[attr-defined]
    return seq or None  # patch markers take no seq (0)


def _value_fields(attrs: Message | None, limit: int, prefix: str = "") -> Iterator[tuple[str, str]]:
    """(path, text) of every value in ``attrs``: each payload decoded, and search
    attributes with their typed values. Failures are left out: their details belong to
    the failure view."""
    if attrs is None:
        return
    for field, value in attrs.ListFields():
        target = field.message_type
        if target is None or target.full_name == "durable_rpc.v1.Failure":
            continue
        path = prefix + field.name
        if target.full_name == "durable_rpc.v1.Payload":
            yield path, payload_text(value, limit=limit)
        elif target.full_name == "durable_rpc.v1.SearchAttributes":
            yield path, value_text(_search_attributes(value), limit=limit)
        elif target.GetOptions().map_entry:
            if target.fields_by_name["value"].message_type is not None:
                for key in sorted(value):
                    yield from _value_fields_of(value[key], f"{path}[{key}]", limit)
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            for index, item in enumerate(value):
                yield from _value_fields_of(item, f"{path}[{index}]", limit)
        else:
            yield from _value_fields(value, limit, path + ".")


def _value_fields_of(value: Message, path: str, limit: int) -> Iterator[tuple[str, str]]:
    if value.DESCRIPTOR.full_name == "durable_rpc.v1.Payload":
        yield path, payload_text(value, limit=limit)  # type: ignore[arg-type]
    else:
        yield from _value_fields(value, limit, path + ".")


def _search_attributes(attributes: Any) -> dict[str, Any]:
    """Search attributes as plain values, by name (a datetime as its UTC time text)."""
    out: dict[str, Any] = {}
    for name in sorted(attributes.indexed_fields):
        typed = attributes.indexed_fields[name]
        which = typed.WhichOneof("value")
        if which == "datetime_value":
            out[name] = time_text(time_ms(typed.datetime_value))
        elif which is not None:
            out[name] = getattr(typed, which)
        else:
            out[name] = None
    return out


# -- one-line summaries ------------------------------------------------------------------


class _Names:
    """The name of the event's seq, as its command gave it."""

    def __init__(self, names: Mapping[int, str], seq: int | None) -> None:
        self._names = names
        self._seq = seq

    def of(self, what: str) -> str:
        name = self._names.get(self._seq or 0)
        if name:
            return f"{what} {_short(name)} (seq {self._seq})"
        return f"{what} seq {self._seq}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _short(text: str, limit: int = NAME_LIMIT) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failure_line(failure: payload_pb2.Failure) -> str:
    return _short(f"{failure.type or 'Error'}: {failure.message}", 2 * NAME_LIMIT)


def _dur(duration: Any) -> str:
    return duration_text(int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000)


def _started(a: Any, n: _Names) -> str:
    parts = [f"workflow {_short(a.workflow_type)}"]
    if a.workflow_version:
        parts.append(f"v{_short(a.workflow_version, 20)}")
    line = " ".join(parts) + f" started (id {_short(a.workflow_id)}, queue {_short(a.task_queue)})"
    if a.parent_workflow_id:
        line += f", child of {_short(a.parent_workflow_id)}"
    if a.continued_from_run_id:
        line += f", continued from run {a.continued_from_run_id}"
    if a.attempt > 1:
        line += f", attempt {a.attempt}"
    return line


def _task_completed(a: Any, n: _Names) -> str:
    line = f"workflow task completed by {_short(a.worker_id) or 'a worker'}"
    if a.build_id:
        line += f" (build {_short(a.build_id, 40)})"
    return line


def _activity_scheduled(a: Any, n: _Names) -> str:
    queue = _short(a.task_queue)
    return f"activity {_short(a.activity_type)} scheduled (seq {a.seq}, queue {queue})"


def _activity_completed(a: Any, n: _Names) -> str:
    return f"{n.of('activity')} completed on attempt {a.attempt}"


def _activity_failed(a: Any, n: _Names) -> str:
    how = "failed ambiguously" if a.ambiguous else "failed"
    return f"{n.of('activity')} {how} on attempt {a.attempt}: {_failure_line(a.failure)}"


def _activity_cancelled(a: Any, n: _Names) -> str:
    attempt = f" (attempt {a.attempt})" if a.attempt else " before any attempt started"
    return f"{n.of('activity')} cancelled{attempt}"


def _marker(a: Any, n: _Names) -> str:
    if a.kind == "local_activity":
        outcome = "failed" if a.id == "failed" else "completed"
        return f"local activity seq {a.seq} {outcome}"
    if a.kind == "side_effect":
        return f"side effect recorded (seq {a.seq})"
    if a.kind in ("patch", "version"):
        return f"{a.kind} marker {_short(a.id)}"
    seq = f" (seq {a.seq})" if a.seq else ""
    return f"marker {_short(a.kind)} {_short(a.id)}".rstrip() + seq


def _cancel_requested(a: Any, n: _Names) -> str:
    line = f"cancel requested: {_short(a.reason)}" if a.reason else "cancel requested"
    # cleanup_deadline: cooperative cancellation's, read only when the message has it.
    if "cleanup_deadline" in a.DESCRIPTOR.fields_by_name and a.HasField("cleanup_deadline"):
        line += f" (terminated if still open at {time_text(time_ms(a.cleanup_deadline))})"
    return line


def _update_completed(a: Any, n: _Names) -> str:
    if a.HasField("failure"):
        return f"update {_short(a.update_id)} failed: {_failure_line(a.failure)}"
    return f"update {_short(a.update_id)} completed"


def _child_closed(how: str) -> Callable[[Any, _Names], str]:
    def summary(a: Any, n: _Names) -> str:
        line = f"{n.of('child workflow')} {how}"
        if "failure" in a.DESCRIPTOR.fields_by_name and a.HasField("failure"):
            line += f": {_failure_line(a.failure)}"
        return line

    return summary


_SUMMARIES: dict[str, Callable[[Any, _Names], str]] = {
    "workflow_started": _started,
    "workflow_task_completed": _task_completed,
    "activity_scheduled": _activity_scheduled,
    "activity_completed": _activity_completed,
    "activity_failed": _activity_failed,
    "activity_cancel_requested": lambda a, n: f"cancel of {n.of('activity')} requested",
    "activity_cancelled": _activity_cancelled,
    "timer_started": lambda a, n: f"timer started (seq {a.seq}, {_dur(a.duration)})",
    "timer_fired": lambda a, n: f"timer fired (seq {a.seq})",
    "timer_cancelled": lambda a, n: f"timer cancelled (seq {a.seq})",
    "signal_received": lambda a, n: f"signal {_short(a.signal_name)} received",
    "cancel_requested": _cancel_requested,
    "workflow_completed": lambda a, n: "workflow completed",
    "workflow_failed": lambda a, n: f"workflow failed: {_failure_line(a.failure)}",
    "workflow_cancelled": lambda a, n: "workflow cancelled",
    "workflow_terminated": lambda a, n: (
        f"workflow terminated: {_short(a.reason)}" if a.reason else "workflow terminated"
    ),
    "workflow_timed_out": lambda a, n: (
        f"workflow timed out ({_short(a.timeout_kind) or 'timeout'})"
    ),
    "workflow_continued_as_new": lambda a, n: f"continued as new run {a.new_run_id}",
    "marker_recorded": _marker,
    "search_attributes_upserted": lambda a, n: (
        "search attributes upserted: "
        + _short(", ".join(sorted(a.search_attributes.indexed_fields)) or "none")
    ),
    "memo_upserted": lambda a, n: (
        "memo upserted: " + _short(", ".join(sorted(a.memo.fields)) or "none")
    ),
    "update_accepted": lambda a, n: (
        f"update {_short(a.update_name)} accepted (id {_short(a.update_id)})"
    ),
    "update_completed": _update_completed,
    "child_workflow_initiated": lambda a, n: (
        f"child workflow {_short(a.workflow_type)} initiated "
        f"(seq {a.seq}, id {_short(a.workflow_id)}, queue {_short(a.task_queue)})"
    ),
    "child_cancel_requested": lambda a, n: f"cancel of {n.of('child workflow')} requested",
    "child_workflow_started": lambda a, n: f"{n.of('child workflow')} started (run {a.run_id})",
    "child_workflow_start_failed": lambda a, n: (
        f"{n.of('child workflow')} could not start: {_short(a.reason)}: {_short(a.message)}"
    ),
    "child_workflow_completed": _child_closed("completed"),
    "child_workflow_failed": _child_closed("failed"),
    "child_workflow_cancelled": _child_closed("cancelled"),
    "child_workflow_terminated": _child_closed("terminated"),
    "child_workflow_timed_out": _child_closed("timed out"),
    "external_signal_initiated": lambda a, n: (
        f"signal {_short(a.signal_name)} sent to {_short(a.workflow_id)} (seq {a.seq})"
    ),
    "external_signal_delivered": lambda a, n: f"{n.of('signal')} delivered to run {a.run_id}",
    "external_signal_failed": lambda a, n: (
        f"{n.of('signal')} not delivered: {_short(a.reason)}: {_short(a.message)}"
    ),
    "budget_reservation_requested": lambda a, n: (
        f"{a.amount} units of budget {_short(a.budget)} requested (seq {a.seq})"
    ),
    "budget_released": lambda a, n: f"{n.of('budget')} released",
    "budget_reserved": lambda a, n: f"{n.of('budget')} reserved",
    "budget_reserve_failed": lambda a, n: (
        f"{n.of('budget')} refused: {_short(a.reason)}: {_short(a.message)}"
    ),
    # Message streams: summarised by name; a summary only runs for a kind the protos
    # define.
    "stream_read_requested": lambda a, n: (
        f"read of stream {_short(a.stream)} from offset {a.offset} requested (seq {a.seq}"
        + (", waiting)" if a.wait else ")")
    ),
    "stream_read": lambda a, n: (
        f"stream {_short(a.stream)} read: {len(a.items)} item(s) from offset {a.offset} "
        f"(seq {a.seq})"
    ),
    "stream_appended": lambda a, n: (
        f"{a.count} item(s) appended to stream {_short(a.stream)} at offset {a.first_offset} "
        f"(seq {a.seq})"
    ),
}
