"""Request validation shared by the services: names, namespaces, payloads."""

from __future__ import annotations

import re

from durable_rpc import payload
from durable_rpc.errors import InvalidArgumentError, InvalidPayloadError
from durable_rpc.v1 import payload_pb2

DEFAULT_NAMESPACE = "default"
MAX_NAME_LENGTH = 256
_CONTROL_CHARACTER = re.compile(r"[\x00-\x1f\x7f]")


def namespace(value: str) -> str:
    return value or DEFAULT_NAMESPACE


def name(field: str, value: str, *, required: bool = True) -> str:
    if required and not value:
        raise InvalidArgumentError(f"{field} is required")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidArgumentError(f"{field} is longer than {MAX_NAME_LENGTH} characters")
    if _CONTROL_CHARACTER.search(value):
        raise InvalidArgumentError(f"{field} contains control characters")
    return value


def payload_bytes(field: str, message: payload_pb2.Payload, *, has: bool) -> bytes:
    """The serialized Payload after checking its frame decodes (an absent one is None)."""
    if not has:
        return payload_pb2.Payload(data=payload.encode(None)).SerializeToString()
    if message.HasField("external"):
        raise InvalidPayloadError(f"{field}: external payload references are not accepted yet")
    try:
        payload.validate(message.data)
    except payload.PayloadError as exc:
        raise InvalidPayloadError(f"{field}: {exc}") from exc
    return message.SerializeToString()


def lease_fields(task_id: int, worker_id: str, fencing_token: int) -> None:
    if task_id <= 0:
        raise InvalidArgumentError("lease.task_id must be positive")
    name("lease.worker_id", worker_id)
    if fencing_token <= 0:
        raise InvalidArgumentError("lease.fencing_token must be positive")
