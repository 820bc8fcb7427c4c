"""Typed search attributes and memo: Python values <-> their protobuf messages.

Type of a value: ``str`` -> keyword, :class:`Text` -> text, ``bool`` -> bool, ``int``
-> int (64-bit), ``float`` -> double (finite), ``datetime`` -> datetime (naive = UTC).
Anything else raises :class:`~durable_rpc.errors.InvalidArgumentError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from durable_rpc import converter
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.v1 import payload_pb2, search_attributes_pb2

__all__ = ["Text", "from_proto", "memo_from_proto", "memo_to_proto", "to_proto"]


class Text(str):
    """A ``text`` search attribute (a plain ``str`` is a ``keyword``)."""


def to_proto(values: Mapping[str, Any] | None) -> search_attributes_pb2.SearchAttributes:
    attrs = search_attributes_pb2.SearchAttributes()
    for name, value in (values or {}).items():
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(
                f"search attribute names must be non-empty strings: {name!r}"
            )
        field = attrs.indexed_fields[name]
        if isinstance(value, Text):
            field.type, field.string_value = "text", str(value)
        elif isinstance(value, str):
            field.type, field.string_value = "keyword", value
        elif isinstance(value, bool):
            field.type, field.bool_value = "bool", value
        elif isinstance(value, int):
            if not -(2**63) <= value < 2**63:
                raise InvalidArgumentError(f"search attribute {name!r}: int out of 64-bit range")
            field.type, field.int_value = "int", value
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidArgumentError(f"search attribute {name!r} must be finite")
            field.type, field.double_value = "double", value
        elif isinstance(value, datetime):
            moment = value if value.tzinfo else value.replace(tzinfo=UTC)
            field.type = "datetime"
            field.datetime_value.FromDatetime(moment.astimezone(UTC).replace(tzinfo=None))
        else:
            raise InvalidArgumentError(
                f"search attribute {name!r}: unsupported type {type(value).__name__} "
                "(str, Text, int, float, bool or datetime)"
            )
    return attrs


def from_proto(attrs: search_attributes_pb2.SearchAttributes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in sorted(attrs.indexed_fields):
        value = attrs.indexed_fields[name]
        if value.type == "text":
            out[name] = Text(value.string_value)
        elif value.type == "keyword":
            out[name] = value.string_value
        elif value.type == "int":
            out[name] = value.int_value
        elif value.type == "double":
            out[name] = value.double_value
        elif value.type == "bool":
            out[name] = value.bool_value
        elif value.type == "datetime":
            out[name] = value.datetime_value.ToDatetime(tzinfo=UTC)
    return out


def memo_to_proto(values: Mapping[str, Any] | None) -> search_attributes_pb2.Memo:
    memo = search_attributes_pb2.Memo()
    for key, value in (values or {}).items():
        memo.fields[key].CopyFrom(payload_pb2.Payload(data=converter.encode(value)))
    return memo


def memo_from_proto(memo: search_attributes_pb2.Memo) -> dict[str, Any]:
    return {key: converter.decode(memo.fields[key].data) for key in memo.fields}
