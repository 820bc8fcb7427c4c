"""Protobuf messages as a person reads them: payloads decoded to values, failures as
type + message (stack traces only when asked for)."""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from durable_rpc import payload
from durable_rpc.cli._codec import operator_keys
from durable_rpc.codec import readable
from durable_rpc.v1 import payload_pb2


def plain(value: Any) -> Any:
    """A decoded Value made JSON-printable (bytes as base64)."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def payload_value(p: payload_pb2.Payload) -> Any:
    """The value a payload frame holds; an offloaded one by its reference, an encrypted
    one decrypted with the operator's keys, or as ``<encrypted: key k1>`` without its key
    (``cli/_codec.py``)."""
    if p.HasField("external"):
        return {"$external": json_format.MessageToDict(p.external)}
    shown = readable(p, decrypt=operator_keys())
    if isinstance(shown, str):
        return shown
    p = shown
    if not p.data:
        return None
    try:
        return plain(payload.decode(p.data))
    except payload.PayloadError as exc:
        return f"<{exc.reason}>"


def failure_dict(failure: payload_pb2.Failure, *, stack: bool) -> dict[str, Any]:
    """A failure as type and message (and its cause); the stack trace only with ``stack``."""
    out: dict[str, Any] = {"type": failure.type, "message": failure.message}
    if failure.non_retryable:
        out["non_retryable"] = True
    if failure.HasField("details"):
        out["details"] = payload_value(failure.details)
    if stack and failure.stack_trace:
        out["stack_trace"] = failure.stack_trace
    if failure.HasField("cause"):
        out["cause"] = failure_dict(failure.cause, stack=stack)
    return out


def failure_line(failure: payload_pb2.Failure) -> str:
    line = f"{failure.type}: {failure.message}"
    if failure.HasField("cause"):
        return f"{line} (caused by {failure_line(failure.cause)})"
    return line


def message_dict(msg: Message, *, stack: bool) -> dict[str, Any]:
    """``msg`` as protobuf JSON (field names, enums, timestamps as usual) with every
    Payload inside replaced by its decoded value and every Failure by :func:`failure_dict`."""
    out = json_format.MessageToDict(msg)
    _decode_into(msg, out, stack)
    return out


def _decode_into(msg: Message, out: dict[str, Any], stack: bool) -> None:
    for field, value in msg.ListFields():
        message_type = field.message_type
        key = field.camelcase_name  # MessageToDict's key: our protos set no json_name
        if message_type is None or key not in out:
            continue
        if message_type.GetOptions().map_entry:
            if message_type.fields_by_name["value"].message_type is not None:
                out[key] = {str(k): _convert(v, out[key][str(k)], stack) for k, v in value.items()}
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            out[key] = [_convert(v, o, stack) for v, o in zip(value, out[key], strict=True)]
        else:
            out[key] = _convert(value, out[key], stack)


def _convert(value: Message, rendered: Any, stack: bool) -> Any:
    if isinstance(value, payload_pb2.Payload):
        return payload_value(value)
    if isinstance(value, payload_pb2.Failure):
        return failure_dict(value, stack=stack)
    if isinstance(rendered, dict):  # well-known types (Timestamp, Duration) render as strings
        _decode_into(value, rendered, stack)
    return rendered
