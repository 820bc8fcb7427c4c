"""Request validation shared by the services: names, namespaces, payloads, page tokens.

The rules every request meets whatever its RPC (identifier bounds, timestamp ranges, enum
values...) are checked from the message descriptors by ``_validate_message``, before any
handler runs; the helpers here add what a field's meaning requires (required, a payload
frame, a page token this server issued).
"""

from __future__ import annotations

import re

from durable_rpc import payload
from durable_rpc.errors import (
    InvalidArgumentError,
    InvalidCleanupTimeoutError,
    InvalidPayloadError,
)
from durable_rpc.server._validate_message import MAX_IDENTIFIER_BYTES, identifier
from durable_rpc.v1 import payload_pb2, service_pb2

DEFAULT_NAMESPACE = "default"
_SHA256_BYTES = 32
# The metadata key a payload codec names its encoding with (durable_rpc.codec.ENCODING).
_ENCODING = "encoding"
# Page tokens are decimal row or event ids: ASCII digits only (int() would also take
# "-5", " 7", "1_0" and other scripts' digits), and small enough for a 64-bit column.
_PAGE_TOKEN = re.compile(rb"[1-9][0-9]{0,17}")
DAY_MS = 86_400_000
#: Longest cleanup a cancellation may grant. The deadline is recorded as a Timestamp,
#: which ends at the year 9999: a Duration's full range (10,000 years) would not fit.
MAX_CLEANUP_TIMEOUT_MS = 366 * DAY_MS

__all__ = ["MAX_IDENTIFIER_BYTES", "name", "namespace", "page_token", "payload_bytes"]


def namespace(value: str) -> str:
    return value or DEFAULT_NAMESPACE


def name(field: str, value: str, *, required: bool = True) -> str:
    if required and not value:
        raise InvalidArgumentError(f"{field} is required")
    identifier(field, value)
    return value


def page_token(field: str, token: bytes) -> int | None:
    """The id a page token this server issued carries (None when there is no token)."""
    if not token:
        return None
    if _PAGE_TOKEN.fullmatch(token) is None:
        raise InvalidArgumentError(f"{field} is not one this server issued")
    return int(token)


def payload_bytes(
    field: str, message: payload_pb2.Payload, *, has: bool, external: bool = True
) -> bytes:
    """The serialized Payload after checking its frame decodes (an absent one is None).

    An external reference is checked for shape here; that the namespace holds the payload
    is checked by the store in the transaction that writes it to history (``record_refs``).
    ``external=False``: a payload kept outside history (a schedule's input), which no run
    would hold for retention, must be inline.

    A payload whose metadata names an ``encoding`` is a client codec's output (encrypted,
    compressed: docs/engine.md, "Payload codecs"): its bytes are opaque here and stored as
    given; only its metadata's bounds were checked (``_validate_message``)."""
    if not has:
        return payload_pb2.Payload(data=payload.encode(None)).SerializeToString()
    if message.HasField("external"):
        if not external:
            raise InvalidPayloadError(f"{field}: must be inline (no external reference)")
        ref = message.external
        if message.data or len(ref.sha256) != _SHA256_BYTES or ref.size <= 0:
            raise InvalidPayloadError(
                f"{field}: an external reference needs a {_SHA256_BYTES}-byte sha256, a "
                "positive size and no inline data"
            )
        return message.SerializeToString()
    if message.metadata:
        if _ENCODING not in message.metadata:
            raise InvalidPayloadError(f"{field}: metadata without an {_ENCODING!r} key")
        return message.SerializeToString()
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


def cleanup_timeout_ms(
    request: service_pb2.CancelWorkflowRequest | service_pb2.BatchWorkflowsRequest,
) -> int | None:
    """A cancellation's cleanup timeout in ms (None: unset, no deadline); a zero or
    negative one, or one past MAX_CLEANUP_TIMEOUT_MS, is INVALID_CLEANUP_TIMEOUT."""
    if not request.HasField("cleanup_timeout"):
        return None
    timeout_ms = request.cleanup_timeout.ToMilliseconds()
    if timeout_ms <= 0:
        raise InvalidCleanupTimeoutError(f"cleanup_timeout must be positive, got {timeout_ms} ms")
    if timeout_ms > MAX_CLEANUP_TIMEOUT_MS:
        raise InvalidCleanupTimeoutError(
            f"cleanup_timeout must be at most {MAX_CLEANUP_TIMEOUT_MS // DAY_MS} days "
            "(unset: no cleanup deadline)"
        )
    return timeout_ms
