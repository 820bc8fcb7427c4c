"""Finding the Payload messages inside any protobuf message, and the external references
among them (the payload store: docs/engine.md, "Large payloads").

One walker for every message type: the SDK's channel externalizes and resolves the
payloads of every request and response with it, and the store finds the references a
history event holds with it, so no RPC or event kind has to be listed by hand. Which
fields can lead to a Payload is worked out once per message type from the descriptors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from durable_rpc.v1 import history_pb2, payload_pb2

_PAYLOAD = payload_pb2.Payload.DESCRIPTOR

#: The most bytes of external payloads downloaded for one response (the SDKs'
#: ``max_external_payload_bytes``), and the largest payload a server accepts to store.
DEFAULT_MAX_EXTERNAL_PAYLOAD_BYTES = 64 * 2**20

#: A serialized ``Payload.external`` (field 2, length 35..42) starting with its 32-byte
#: ``sha256`` (field 1). Bytes without it hold no reference, so most messages are judged
#: by one C-level search instead of a parse and a walk. A chance match costs only a walk.
_REF_MARK = re.compile(rb"\x12[\x23-\x2a]\x0a\x20")

# Per message type: the names of its fields that can lead to a Payload.
_paths: dict[str, frozenset[str]] = {}


def _leads_to_payload(descriptor: Descriptor, seen: set[str]) -> bool:
    if descriptor is _PAYLOAD:
        return True
    if descriptor.full_name in seen:  # a recursive type (Failure.cause): judged above
        return False
    seen.add(descriptor.full_name)
    return any(
        target is not None and _leads_to_payload(target, seen)
        for target in map(_target, descriptor.fields)
    )


def _target(field: FieldDescriptor) -> Descriptor | None:
    """The message type a field holds (a map's value type; None: a scalar)."""
    message_type: Descriptor | None = field.message_type
    if message_type is not None and message_type.GetOptions().map_entry:
        value: Descriptor | None = message_type.fields_by_name["value"].message_type
        return value
    return message_type


def _names(descriptor: Any) -> frozenset[str]:
    found = _paths.get(descriptor.full_name)
    if found is None:
        found = frozenset(
            field.name
            for field in descriptor.fields
            if (target := _target(field)) is not None and _leads_to_payload(target, set())
        )
        _paths[descriptor.full_name] = found
    return found


def payloads(message: Message) -> Iterator[payload_pb2.Payload]:
    """Every Payload inside ``message`` (itself, when it is one)."""
    if message.DESCRIPTOR is _PAYLOAD:
        yield message  # type: ignore[misc]
        return
    names = _names(message.DESCRIPTOR)
    if not names:
        return
    # ListFields: only the fields that are set (one C call), not every field's HasField.
    for field, value in message.ListFields():
        if field.name not in names:
            continue
        if field.message_type.GetOptions().map_entry:
            for item in value.values():
                yield from payloads(item)
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            for item in value:
                yield from payloads(item)
        else:
            yield from payloads(value)


def may_hold_refs(raw: bytes) -> bool:
    """False when serialized bytes certainly hold no external reference."""
    return _REF_MARK.search(raw) is not None


def refs_of(message: Message) -> set[tuple[bytes, int]]:
    """The (sha256, size) of every external reference inside ``message``."""
    return {
        (p.external.sha256, p.external.size) for p in payloads(message) if p.HasField("external")
    }


def event_refs(data: bytes) -> set[tuple[bytes, int]]:
    """The references a serialized history event holds."""
    if not may_hold_refs(data):
        return set()
    return refs_of(history_pb2.HistoryEvent.FromString(data))
