"""The Rust codec: byte-equality with fastavro, round trips, and every rejection."""

from __future__ import annotations

import io
import json
import math
import struct
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_rpc import payload

SCHEMA = fastavro.parse_schema(json.loads(payload.VALUE_SCHEMA_JSON))
HEADER = b"\xc3\x01" + payload.VALUE_SCHEMA_FINGERPRINT
NS = "durable_workflow.protocol."

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.binary(max_size=40)
    | st.text(max_size=40)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=10), children, max_size=6)
    ),
    max_leaves=40,
)


def fastavro_frame(value: Any) -> bytes:
    """The same value written by fastavro with the schema, branches named explicitly."""

    def record(v: Any) -> dict[str, Any]:
        if v is None:
            return {"value": None}
        if isinstance(v, bool):
            return {"value": (NS + "BooleanValue", {"boolean": v})}
        if isinstance(v, int):
            return {"value": (NS + "LongValue", {"long": v})}
        if isinstance(v, float):
            return {"value": (NS + "DoubleValue", {"double": v})}
        if isinstance(v, bytes):
            return {"value": (NS + "BytesValue", {"bytes": v})}
        if isinstance(v, str):
            return {"value": (NS + "StringValue", {"string": v})}
        if isinstance(v, list):
            return {"value": (NS + "ArrayValue", {"items": [record(i) for i in v]})}
        return {"value": (NS + "MapValue", {"entries": {k: record(i) for k, i in v.items()}})}

    buf = io.BytesIO(HEADER)
    buf.seek(len(HEADER))
    fastavro.schemaless_writer(buf, SCHEMA, record(value))
    return buf.getvalue()


def same(a: Any, b: Any) -> bool:
    """Type-strict equality (1 == 1.0 == True under plain ==), -0.0 distinct from 0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(values)
def test_bytes_equal_fastavro_and_round_trip(value: Any) -> None:
    frame = payload.encode(value)
    assert frame == fastavro_frame(value)
    assert same(payload.decode(frame), value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_random_bytes_never_crash_the_decoder(data: bytes) -> None:
    for candidate in (data, HEADER + data):
        try:
            payload.decode(candidate)
        except payload.PayloadError as exc:
            assert exc.reason in {"invalid_payload_framing", "unsupported_payload_schema"}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (math.nan, "non_finite_float"),
        (math.inf, "non_finite_float"),
        ([1, -math.inf], "non_finite_float"),
        (2**63, "integer_overflow"),
        (-(2**63) - 1, "integer_overflow"),
        ({1: "a"}, "invalid_map_key"),
        ({"ok": {None: 1}}, "invalid_map_key"),
        (object(), "unsupported_value_type"),
        ((1, 2), "unsupported_value_type"),
        ({1, 2}, "unsupported_value_type"),
        ([1, complex(1, 2)], "unsupported_value_type"),
    ],
)
def test_encode_rejects_with_a_stable_reason(value: Any, reason: str) -> None:
    with pytest.raises(payload.PayloadError) as info:
        payload.encode(value)
    assert info.value.reason == reason


def test_cyclic_and_too_deep_values_are_rejected_not_crashing() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(payload.PayloadError) as info:
        payload.encode(cyclic)
    assert info.value.reason == "nesting_too_deep"
    deep: Any = None
    for _ in range(payload.MAX_DEPTH):
        deep = [deep]
    assert payload.decode(payload.encode(deep)) == deep


def test_hostile_item_count_fails_fast() -> None:
    count = 1 << 60
    zigzag = count << 1
    varint = bytearray()
    while zigzag >= 0x80:
        varint.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    varint.append(zigzag)
    with pytest.raises(payload.PayloadError) as info:
        payload.decode(HEADER + b"\x0c" + bytes(varint) + b"\x00")
    assert info.value.reason == "invalid_payload_framing"


def test_sized_blocks_from_other_encoders_are_accepted() -> None:
    # [1, 2] as one block with a negative count and a byte size, then [3] in a second block.
    frame = HEADER + bytes([0x0C, 0x03, 0x04, 0x04, 0x02, 0x04, 0x04, 0x02, 0x04, 0x06, 0x00])
    assert payload.decode(frame) == [1, 2, 3]


def test_duplicate_map_keys_are_rejected_on_decode() -> None:
    frame = HEADER + bytes([0x0E, 0x04, 0x02, ord("k"), 0x00, 0x02, ord("k"), 0x00, 0x00])
    with pytest.raises(payload.PayloadError) as info:
        payload.decode(frame)
    assert info.value.reason == "invalid_payload_framing"


def test_bytearray_and_subclasses_encode_as_their_base() -> None:
    class Name(str):
        pass

    assert payload.decode(payload.encode(bytearray(b"ab"))) == b"ab"
    assert payload.decode(payload.encode({Name("k"): Name("v")})) == {"k": "v"}


def test_error_carries_reason_and_message() -> None:
    with pytest.raises(payload.PayloadError) as info:
        payload.decode(b"")
    err = info.value
    assert err.reason == "invalid_payload_framing"
    assert "magic" in err.message
    assert str(err).startswith("invalid_payload_framing: ")
