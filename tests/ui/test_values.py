"""The UI's value and event views (durable_rpc.ui._values): payloads decoded to indented
text that never raises, and one view per history event, over recorded golden histories
(tests/ui/golden, from tests/ui/record_golden.py) and synthetic ones."""

from __future__ import annotations

import hashlib
import random
import zlib
from pathlib import Path

import pytest

from durable_rpc import payload
from durable_rpc.codec import CompressionCodec, readable
from durable_rpc.ui import _values
from durable_rpc.ui._values import (
    event_summaries,
    event_summary,
    payload_text,
)
from durable_rpc.v1 import history_pb2, payload_pb2
from tests.ui.history_builder import (
    HistoryBuilder,
    all_kinds,
    failure,
    unknown_kind_event,
    value,
)

GOLDEN = Path(__file__).parent / "golden"


def golden(name: str) -> list[history_pb2.HistoryEvent]:
    return list(history_pb2.History.FromString((GOLDEN / f"{name}.pb").read_bytes()).events)


def test_a_value_is_indented_json_like_text() -> None:
    text = payload_text(value({"order": "o-1", "items": [1, 2.5, None, True], "empty": {}}))
    assert text == (
        "{\n"
        '  "order": "o-1",\n'
        '  "items": [\n'
        "    1,\n"
        "    2.5,\n"
        "    null,\n"
        "    true\n"
        "  ],\n"
        '  "empty": {}\n'
        "}"
    )


def test_bytes_are_a_base64_preview() -> None:
    assert payload_text(value(b"%PDF\x00")) == "<bytes 5: base64 JVBERgA=>"
    long = payload_text(value(bytes(range(256))))
    assert long.startswith("<bytes 256: base64 AAECAwQF") and long.endswith("...>")
    assert len(long) < 100, "a preview, not the whole value"


def test_text_is_cut_at_the_limit_with_a_note() -> None:
    big = value({"rows": [{"id": i, "name": "x" * 50} for i in range(1000)]})
    text = payload_text(big, limit=500)
    body, note = text.rsplit("\n", 1)
    assert len(body) == 500
    assert note == "... (truncated at 500 characters)"
    huge_string = payload_text(value("y" * 5_000_000), limit=100)
    assert huge_string.endswith("(truncated at 100 characters)") and len(huge_string) < 200


def test_no_payload_and_an_empty_one() -> None:
    assert payload_text(None) == "(none)"
    assert payload_text(payload_pb2.Payload()) == "(none)"


def test_an_external_reference_is_described_not_fetched() -> None:
    digest = hashlib.sha256(b"big").digest()
    ref = payload_pb2.Payload(external=payload_pb2.ExternalPayload(sha256=digest, size=5 << 20))
    assert payload_text(ref) == (
        f"<external payload: {5 << 20} bytes, sha256 {digest.hex()[:16]}..., not fetched>"
    )


def test_an_encrypted_payload_is_named_not_decoded() -> None:
    # Even when the bytes happen to be a valid frame: the codec's metadata says they are
    # its output, and the UI holds no keys.
    encoded = payload_pb2.Payload(
        data=payload.encode("secret"),
        metadata={"encoding": "binary/encrypted", "encryption-key-id": "k-2026"},
    )
    text = payload_text(encoded)
    assert text == "<encrypted: key k-2026>"
    assert "secret" not in text
    unknown = payload_pb2.Payload(data=b"x", metadata={"encoding": "binary/rot13"})
    assert payload_text(unknown) == "<encoded: binary/rot13>"


def test_a_compressed_payload_is_shown_decompressed() -> None:
    plain = value({"order": "o-1", "lines": ["x" * 40] * 100})
    (packed,) = CompressionCodec(min_bytes=0).encode([plain])
    assert packed.metadata["encoding"] == "binary/zlib"
    assert payload_text(packed) == payload_text(plain)
    # A compressed payload wrapping an encrypted one: decompressed, then named.
    sealed = payload_pb2.Payload(
        data=b"\x00" * 2000, metadata={"encoding": "binary/encrypted", "encryption-key-id": "k1"}
    )
    (outer,) = CompressionCodec(min_bytes=0).encode([sealed])
    assert outer.metadata["encoding"] == "binary/zlib"
    assert payload_text(outer) == "<encrypted: key k1>"


def test_a_broken_or_oversized_compressed_payload_is_described() -> None:
    broken = payload_pb2.Payload(data=b"not zlib", metadata={"encoding": "binary/zlib"})
    assert payload_text(broken) == "<undecodable: binary/zlib>"
    # A megabyte of zeros packs into about a kilobyte; a viewer stops inflating at its limit.
    inner = payload_pb2.Payload(data=bytes(1_000_000)).SerializeToString()
    bomb = payload_pb2.Payload(data=zlib.compress(inner, 9), metadata={"encoding": "binary/zlib"})
    assert len(bomb.data) < 2_000
    assert readable(bomb, limit=100_000) == "<compressed: over 100000 bytes>"
    assert isinstance(readable(bomb), payload_pb2.Payload)


@pytest.mark.parametrize(
    "data",
    [
        b"\x00\x01\x02",  # no magic
        b"\xc3\x01\x00",  # shorter than the header
        payload.encode([1, 2, 3])[:-1],  # truncated datum
        b"\xc3\x01" + b"\x00" * 8 + b"\x0c",  # wrong schema fingerprint
    ],
)
def test_a_malformed_payload_says_so(data: bytes) -> None:
    assert (
        payload_text(payload_pb2.Payload(data=data)) == f"<undecodable payload: {len(data)} bytes>"
    )


def test_random_frames_never_raise() -> None:
    rng = random.Random(19)
    header = payload.encode(None)[:10]
    for _ in range(2000):
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        text = payload_text(payload_pb2.Payload(data=header + body), limit=200)
        assert isinstance(text, str) and text


def test_every_event_kind_has_a_summary_and_none_raises() -> None:
    # An event of every kind the protos define, with its fields unset: a summary of its
    # own (not the generic fallback), a kind and a time. A kind added to history.proto
    # without a summary fails here.
    assert sorted(set(all_kinds()) - set(_values._SUMMARIES)) == []
    b = HistoryBuilder()
    for kind in all_kinds():
        view = event_summary(b.add(kind, 1))
        assert view.kind == kind
        assert view.summary and "\n" not in view.summary


def test_an_unknown_kind_gets_a_generic_view() -> None:
    view = event_summary(unknown_kind_event(7, 1_000))
    assert (view.event_id, view.kind, view.time_ms) == (7, "unknown", 1_000)
    assert view.summary == "an event of a kind this version does not know"
    assert view.payloads == () and view.failure is None and view.lane is None


def test_the_checkout_golden_history() -> None:
    views = event_summaries(golden("checkout"))
    by_kind = [(v.event_id, v.kind, v.summary) for v in views]
    assert by_kind[0][2] == "workflow Checkout v1 started (id checkout-o-1, queue ui-golden)"
    assert (
        3,
        "activity_scheduled",
        "activity charge scheduled (seq 1, queue ui-golden)",
    ) in by_kind
    assert (4, "activity_completed", "activity charge (seq 1) completed on attempt 2") in by_kind
    ship = next(v for v in views if v.kind == "activity_completed" and v.seq == 2)
    assert ship.lane == "activity:2"
    assert ship.payloads == (
        (
            "result",
            "{\n"
            '  "order": "o-1",\n'
            '  "carrier": "post",\n'
            '  "weight_g": 1250,\n'
            '  "label": <bytes 10: base64 JVBERi0xLjcAAQ==>\n'
            "}",
        ),
    )
    assert views[0].payloads == (("input", '[\n  "o-1"\n]'),)
    assert views[0].time.startswith("20") and views[0].time_ms > 0


def test_a_failure_has_its_message_stack_trace_and_cause() -> None:
    views = event_summaries(golden("failed"))
    activity = next(v for v in views if v.kind == "activity_failed")
    assert activity.summary == (
        "activity refund (seq 1) failed on attempt 1: RefundRefused: order o-4 was never charged"
    )
    assert activity.failure is not None
    assert (activity.failure.type, activity.failure.message) == (
        "RefundRefused",
        "order o-4 was never charged",
    )
    assert "raise ApplicationError" in activity.failure.stack_trace
    run = next(v for v in views if v.kind == "workflow_failed")
    assert run.failure is not None and run.failure.cause is not None
    assert run.failure.line == (
        "ActivityError: activity 'refund' (seq 1) failed: RefundRefused: order o-4 was never "
        "charged (caused by RefundRefused: order o-4 was never charged)"
    )


def test_the_fulfil_golden_history_names_children_signals_and_local_activities() -> None:
    summaries = {v.kind: v for v in event_summaries(golden("fulfil"))}
    assert summaries["signal_received"].summary == "signal approve received"
    assert summaries["signal_received"].payloads == (("input", '[\n  "alice"\n]'),)
    assert summaries["timer_started"].summary == "timer started (seq 1, 5m)"
    assert summaries["child_workflow_completed"].summary == (
        "child workflow Checkout (seq 3) completed"
    )
    marker = summaries["marker_recorded"]
    assert (marker.summary, marker.lane) == (
        "local activity seq 2 completed",
        "local_activity:2",
    )
    details = dict(marker.payloads)["details"]
    assert '"outcome": "failed"' in details and '"message": "stock service busy"' in details


def test_names_are_capped_to_one_line() -> None:
    b = HistoryBuilder()
    event = b.add("signal_received", signal_name="line one\nline two " + "z" * 500)
    view = event_summary(event)
    assert "\n" not in view.summary
    assert view.summary.startswith("signal line one line two zzz")
    assert len(view.summary) < 120


def test_a_failure_chain_is_bounded() -> None:
    root = failure("E0", "root")
    for depth in range(1, 200):
        outer = failure(f"E{depth}", "wrap")
        outer.cause.CopyFrom(root)
        root = outer
    view = event_summary(HistoryBuilder().add("workflow_failed", failure=root))
    assert view.failure is not None
    depth = 0
    cause = view.failure
    while cause.cause is not None:
        cause, depth = cause.cause, depth + 1
    assert depth == 16


def test_search_attributes_are_shown_with_their_values() -> None:
    b = HistoryBuilder()
    event = b.add("search_attributes_upserted")
    fields = event.search_attributes_upserted.search_attributes.indexed_fields
    fields["region"].string_value = "eu-west"
    fields["items"].int_value = 3
    fields["vip"].bool_value = True
    fields["placed"].datetime_value.FromMilliseconds(1_764_600_000_250)
    view = event_summary(event)
    assert view.summary == "search attributes upserted: items, placed, region, vip"
    assert view.payloads == (
        (
            "search_attributes",
            "{\n"
            '  "items": 3,\n'
            '  "placed": "2025-12-01 14:40:00.250",\n'
            '  "region": "eu-west",\n'
            '  "vip": true\n'
            "}",
        ),
    )


@pytest.mark.skipif(
    "cleanup_deadline" not in history_pb2.CancelRequested.DESCRIPTOR.fields_by_name,
    reason="CancelRequested.cleanup_deadline (cooperative cancellation) not built yet",
)
def test_a_cancel_request_names_its_cleanup_deadline() -> None:
    event = HistoryBuilder().add("cancel_requested", reason="customer asked")
    event.cancel_requested.cleanup_deadline.FromMilliseconds(1_764_600_030_000)  # type: ignore[attr-defined]
    assert event_summary(event).summary == (
        "cancel requested: customer asked (terminated if still open at 2025-12-01 14:40:30.000)"
    )
