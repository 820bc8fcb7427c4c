"""The codec against the Durable Workflow SDKs' golden frames."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from durable_rpc import payload
from tests.conftest import INTEROP, SHARED_INTEROP, VENDORED_INTEROP


def _golden() -> dict[str, Any]:
    return json.loads((INTEROP / "golden-avro-value-v1.json").read_text())


GOLDEN = _golden() if (INTEROP / "golden-avro-value-v1.json").is_file() else {}


def test_golden_file_is_present(interop_dir: Path) -> None:
    assert GOLDEN["cases"], "no golden cases"
    assert GOLDEN["malformed_frames"], "no malformed frames"


def test_fingerprint_is_computed_to_the_contract() -> None:
    assert payload.VALUE_SCHEMA_FINGERPRINT.hex() == GOLDEN["fingerprint"] == "e2a33dff55802237"


@pytest.mark.skipif(
    not (SHARED_INTEROP / "golden-avro-value-v1.json").is_file(),
    reason="no shared interop files beside this checkout to compare the copy with",
)
@pytest.mark.parametrize("name", ["golden-avro-value-v1.json", "value.avsc"])
def test_the_vendored_copy_is_the_shared_file(name: str) -> None:
    assert (VENDORED_INTEROP / name).read_bytes() == (SHARED_INTEROP / name).read_bytes()


def test_schema_is_the_shared_one(interop_dir: Path) -> None:
    shared = json.loads((interop_dir / "value.avsc").read_text())
    assert json.loads(payload.VALUE_SCHEMA_JSON) == shared


def _expected(case: dict[str, Any]) -> Any:
    kind = case["kind"]
    if kind == "long":
        return int(case["value"])
    if kind == "double":
        return float(case["value"])
    if kind == "bytes":
        return base64.b64decode(case["value_base64"])
    return case.get("value")


@pytest.mark.parametrize("case", GOLDEN.get("cases", []), ids=lambda c: c["name"])
def test_golden_case_round_trips_byte_for_byte(case: dict[str, Any]) -> None:
    wire = base64.b64decode(case["wire_base64"])
    value = payload.decode(wire)
    assert payload.encode(value) == wire
    if "value" in case or "value_base64" in case:
        expected = _expected(case)
        assert value == expected and type(value) is type(expected)
        if case["name"] == "negative_zero":
            assert str(value) == "-0.0"


@pytest.mark.parametrize("variant", GOLDEN.get("alternate_map_orders", []), ids=lambda c: c["name"])
def test_alternate_map_orders_keep_their_own_order(variant: dict[str, Any]) -> None:
    decoded = [payload.decode(base64.b64decode(w)) for w in variant["wire_base64"]]
    assert all(d == decoded[0] for d in decoded)
    for wire, value in zip(variant["wire_base64"], decoded, strict=True):
        assert payload.encode(value) == base64.b64decode(wire)


@pytest.mark.parametrize("frame", GOLDEN.get("malformed_frames", []), ids=lambda c: c["name"])
def test_malformed_frame_is_rejected_with_its_reason(frame: dict[str, Any]) -> None:
    with pytest.raises(payload.PayloadError) as info:
        payload.decode(base64.b64decode(frame["wire_base64"]))
    assert info.value.reason == frame["error"]
    assert isinstance(info.value, ValueError)
    assert frame["error"] in str(info.value)
