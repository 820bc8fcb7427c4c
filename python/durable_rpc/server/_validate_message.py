"""Checks every request of every RPC against rules read from its message descriptor.

The error interceptor runs :func:`check_request` on each parsed request before its handler,
so no handler (and no RPC added later) sees a value that would make a parser or the store
raise something other than a domain error, and nothing is echoed before it is bounded:

- strings are identifiers (namespace, ids, names, queues, types, versions, build ids,
  map keys...) unless the field is prose (:data:`PROSE_FIELDS`) or free text stored in a
  text column (:data:`FREE_TEXT_FIELDS`): an identifier is at most
  :data:`MAX_IDENTIFIER_BYTES` UTF-8 bytes without control characters; no string outside
  prose may hold NUL (PostgreSQL text cannot);
- ``google.protobuf.Timestamp`` and ``Duration`` must be in their documented ranges (the
  protobuf runtime raises ValueError converting one that is not);
- an enum must hold one of its declared values (proto3 keeps unknown numbers);
- a double or float must be finite.

Only set fields are visited (``ListFields``), so the cost grows with what a request
carries, not with the schema.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from durable_rpc.errors import InvalidArgumentError

MAX_IDENTIFIER_BYTES = 1000
# Human-readable prose kept inside serialized history or failure bytes: any text, bounded
# only by the request size.
PROSE_FIELDS = frozenset({"reason", "message", "stack_trace"})
# Free text stored as a text column (the list query; a string search attribute).
FREE_TEXT_FIELDS = frozenset({"query", "string_value"})

# google/protobuf/timestamp.proto and duration.proto.
_MIN_TIMESTAMP_SECONDS = -62_135_596_800  # 0001-01-01T00:00:00Z
_MAX_TIMESTAMP_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z
_MAX_DURATION_SECONDS = 315_576_000_000  # 10,000 years
_MAX_NANOS = 999_999_999

# Repeated fields whose items are whole requests of their own, checked one by one by the
# handler (so one bad outcome in a CompleteTasks batch fails that item, not the batch).
CHECKED_PER_ITEM = frozenset({"durable_rpc.v1.CompleteTasksRequest.outcomes"})

_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"
_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
_ENUM = FieldDescriptor.TYPE_ENUM
_FLOATS = (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT)


def check_request(message: Message) -> None:
    """Raises InvalidArgumentError naming the first field that breaks a rule. A request
    that is no protobuf message (a generic handler's raw bytes) has no rules here."""
    if not isinstance(message, Message):
        return
    try:
        _check_message(message)
    except _Bad as bad:
        path = "".join(bad.path).lstrip(".")
        raise InvalidArgumentError(f"{path}{bad.problem}") from None


def identifier(path: str, value: str) -> None:
    """An identifier's bounds; ``value`` itself is never echoed."""
    problem = _identifier_problem(value)
    if problem is not None:
        raise InvalidArgumentError(path + problem)


class _Bad(Exception):
    """A broken rule; the field path is collected on the way out (built only then, so
    a valid request costs no path strings)."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        self.path: list[str] = []


def _identifier_problem(value: str) -> str | None:
    size = len(value.encode())
    if size > MAX_IDENTIFIER_BYTES:
        return f" is {size} bytes long, over the {MAX_IDENTIFIER_BYTES}-byte limit"
    if not value.isprintable() and any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return " contains control characters"
    return None


# How a field is checked, decided once per field descriptor.
_SKIP, _MAP, _MESSAGE_FIELD, _IDENTIFIER, _FREE_TEXT, _ENUM_FIELD, _FLOAT = range(7)
_plans: dict[FieldDescriptor, int] = {}


def _plan(field: FieldDescriptor) -> int:
    plan = _plans.get(field)
    if plan is None:
        kind = field.type
        if field.full_name in CHECKED_PER_ITEM:
            plan = _SKIP
        elif kind == _MESSAGE:
            plan = _MAP if field.message_type.GetOptions().map_entry else _MESSAGE_FIELD
        elif kind == _STRING:
            if field.name in PROSE_FIELDS:
                plan = _SKIP
            else:
                plan = _FREE_TEXT if field.name in FREE_TEXT_FIELDS else _IDENTIFIER
        elif kind == _ENUM:
            plan = _ENUM_FIELD
        else:
            plan = _FLOAT if kind in _FLOATS else _SKIP
        _plans[field] = plan
    return plan


def _check_message(message: Any) -> None:
    name = message.DESCRIPTOR.full_name
    if name == _TIMESTAMP:
        _check_timestamp(message)
        return
    if name == _DURATION:
        _check_duration(message)
        return
    for field, value in message.ListFields():
        plan = _plan(field)
        if plan == _SKIP:
            continue
        try:
            if plan == _MAP:
                _check_map(field, value)
            elif field.is_repeated:
                for index, item in enumerate(value):
                    try:
                        _check_value(field, plan, item)
                    except _Bad as bad:
                        bad.path.insert(0, f"[{index}]")
                        raise
            else:
                _check_value(field, plan, value)
        except _Bad as bad:
            bad.path.insert(0, "." + field.name)
            raise


def _check_map(field: FieldDescriptor, value: Any) -> None:
    value_field = field.message_type.fields_by_name["value"]
    plan = _plan(value_field)
    string_keys = field.message_type.fields_by_name["key"].type == _STRING
    for key, item in value.items():
        if string_keys:
            problem = _identifier_problem(key)
            if problem is not None:
                bad = _Bad(problem)
                bad.path.append(" key")
                raise bad
        try:
            _check_value(value_field, plan, item)
        except _Bad as bad:
            bad.path.insert(0, f"[{key!r}]")
            raise


def _check_value(field: FieldDescriptor, plan: int, value: Any) -> None:
    if plan == _MESSAGE_FIELD:
        _check_message(value)
    elif plan == _IDENTIFIER:
        problem = _identifier_problem(value)
        if problem is not None:
            raise _Bad(problem)
    elif plan == _FREE_TEXT:
        if "\x00" in value:
            raise _Bad(" contains a NUL character")
    elif plan == _ENUM_FIELD:
        if field.enum_type.values_by_number.get(value) is None:
            raise _Bad(f": {value} is not a {field.enum_type.name} value")
    elif plan == _FLOAT and not math.isfinite(value):
        raise _Bad(" must be a finite number")


def _check_timestamp(message: Any) -> None:
    if not _MIN_TIMESTAMP_SECONDS <= message.seconds <= _MAX_TIMESTAMP_SECONDS:
        raise _Bad(f": seconds must be in [{_MIN_TIMESTAMP_SECONDS}, {_MAX_TIMESTAMP_SECONDS}]")
    if not 0 <= message.nanos <= _MAX_NANOS:
        raise _Bad(f": nanos must be in [0, {_MAX_NANOS}]")


def _check_duration(message: Any) -> None:
    seconds, nanos = message.seconds, message.nanos
    if abs(seconds) > _MAX_DURATION_SECONDS:
        raise _Bad(f": seconds must be within ±{_MAX_DURATION_SECONDS}")
    if abs(nanos) > _MAX_NANOS:
        raise _Bad(f": nanos must be within ±{_MAX_NANOS}")
    if (seconds < 0 < nanos) or (nanos < 0 < seconds):
        raise _Bad(": seconds and nanos must have the same sign")
