"""The run page's timeline (durable_rpc.ui._timeline): lanes and bars folded from recorded
golden histories (tests/ui/golden, written by tests/ui/record_golden.py from a real server
and worker) and from synthetic ones, and the SVG drawn from them, compared byte for byte
with the golden SVGs next to the histories.

Regenerate the golden SVGs after an intended drawing change, then look at them:

    DURABLE_RPC_REGEN_GOLDEN=1 python -m pytest tests/ui/test_timeline.py
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from durable_rpc.ui._timeline import (
    Timeline,
    TimelineError,
    build_timeline,
    render_timeline_svg,
)
from durable_rpc.v1 import history_pb2, service_pb2
from tests.ui.history_builder import T0, HistoryBuilder, all_kinds, failure, unknown_kind_event

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("DURABLE_RPC_REGEN_GOLDEN") == "1"
NS = {"svg": "http://www.w3.org/2000/svg"}
SVG = "{http://www.w3.org/2000/svg}"
#: Open runs are drawn to a fixed "now" (a minute after their last event): stable output.
OPEN_FOR_MS = 60_000


def golden(name: str) -> list[history_pb2.HistoryEvent]:
    return list(history_pb2.History.FromString((GOLDEN / f"{name}.pb").read_bytes()).events)


def timeline_of(name: str) -> Timeline:
    events = golden(name)
    last = events[-1].event_time.ToMilliseconds()
    return build_timeline(events, now_ms=last + OPEN_FOR_MS)


def parse(svg: str) -> ET.Element:
    """The SVG as XML: it must be well-formed to parse at all."""
    return ET.fromstring(svg)


def classes(element: ET.Element) -> set[str]:
    return set(element.get("class", "").split())


def with_class(root: ET.Element, name: str) -> list[ET.Element]:
    return [e for e in root.iter() if name in classes(e)]


def bars(root: ET.Element, kind: str | None = None) -> list[ET.Element]:
    return [e for e in with_class(root, "bar") if kind is None or e.get("data-kind") == kind]


# -- lanes and bars from the golden histories ----------------------------------------------


def test_checkout_has_one_lane_per_activity_and_its_failed_attempt() -> None:
    t = timeline_of("checkout")
    assert t.status == "completed" and t.workflow_type == "Checkout"
    assert [(lane.key, lane.label) for lane in t.lanes] == [
        ("activity:1", "charge #1"),
        ("activity:2", "ship #2"),
    ]
    charge, ship = (lane.bars[0] for lane in t.lanes)
    # charge failed its first attempt and completed on its second: the history records
    # the second attempt's number only, so the first is a failed attempt of unknown time.
    assert [(a.number, a.outcome, a.failed) for a in charge.attempts] == [
        (1, "failed", True),
        (2, "completed", False),
    ]
    assert charge.attempts[0].start_ms is None and charge.attempts[0].end_ms is None
    assert (charge.status, charge.failed, charge.failed_attempts) == ("completed", False, 1)
    assert charge.closed_ms is not None and charge.closed_ms - charge.scheduled_ms >= 2000, (
        "the retry's 2 s backoff is inside the bar"
    )
    assert (ship.status, ship.failed_attempts, len(ship.attempts)) == ("completed", 0, 1)
    assert ship.scheduled_ms >= charge.closed_ms

    root = parse(render_timeline_svg(t))
    assert len(bars(root, "activity")) == 2, "one bar per activity"
    assert [e.get("data-lane") for e in bars(root, "activity")] == ["activity:1", "activity:2"]
    failed = with_class(root, "failed")
    assert len(failed) == 1 and failed[0].get("data-attempt") == "1"
    assert len(with_class(root, "lane")) == 3, "the run lane and two activity lanes"


def test_fulfil_has_a_timer_a_local_activity_a_child_and_a_signal() -> None:
    t = timeline_of("fulfil")
    assert [lane.key for lane in t.lanes] == ["timer:1", "local_activity:2", "child:3"]
    timer, local, child = (lane.bars[0] for lane in t.lanes)
    assert timer.status == "fired" and timer.due_ms == timer.scheduled_ms + 300_000
    assert timer.closed_ms is not None and timer.closed_ms >= timer.due_ms
    # The local activity's attempt log: the first attempt failed, the second completed;
    # they ran inside the workflow task that recorded the marker.
    assert [(a.number, a.outcome, a.failed) for a in local.attempts] == [
        (1, "failed", True),
        (2, "completed", False),
    ]
    assert local.approximate and all(a.start_ms is not None for a in local.attempts)
    assert local.scheduled_ms <= local.attempts[0].start_ms  # type: ignore[operator]
    assert local.attempts[-1].end_ms <= local.closed_ms  # type: ignore[operator]
    assert "stock service busy" in local.attempts[0].message
    assert (child.status, child.started_ms is not None) == ("completed", True)
    assert t.lanes[2].label == "Checkout #3"
    assert [m.kind for m in t.marks if m.kind == "signal_received"] == ["signal_received"]

    root = parse(render_timeline_svg(t))
    assert {e.get("data-kind") for e in bars(root)} == {"run", "timer", "local_activity", "child"}
    assert len(with_class(root, "failed")) == 1  # the local activity's first attempt
    signal = [e for e in with_class(root, "mark") if e.get("data-kind") == "signal_received"]
    assert len(signal) == 1
    assert "signal approve" in (signal[0].findtext(f"{SVG}title") or "")
    assert with_class(root, "due"), "the timer's due time is ticked"


def test_a_cancelled_run_ends_what_was_open_with_it() -> None:
    t = timeline_of("cancelled")
    assert t.status == "cancelled" and t.closed_ms is not None
    timer, activity = (lane.bars[0] for lane in t.lanes)
    assert timer.status == "cancelled"
    # Nothing served the activity; the run's close ended it: drawn to the close, not "now".
    assert (activity.status, activity.closed_ms, activity.end_ms) == (
        "unresolved",
        t.closed_ms,
        t.closed_ms,
    )
    assert [m.kind for m in t.marks].count("cancel_requested") == 1
    root = parse(render_timeline_svg(t))
    assert not with_class(root, "open")


def test_a_failed_activity_marks_its_bar_and_the_run() -> None:
    t = timeline_of("failed")
    (refund,) = (lane.bars[0] for lane in t.lanes)
    assert (refund.status, refund.failed, refund.failed_attempts) == ("failed", True, 1)
    assert "RefundRefused: order o-4 was never charged" in refund.title
    root = parse(render_timeline_svg(t))
    (bar,) = bars(root, "activity")
    assert bar.get("data-status") == "failed"
    assert any("failed" in classes(e) for e in bar), "the bar's segment is marked failed"
    # Its one attempt is the bar: no notch for an earlier attempt that never was.
    assert len(with_class(bar, "failed")) == 1
    assert not with_class(bar, "attempt")
    (run,) = bars(root, "run")
    assert run.get("data-status") == "failed"


def test_an_open_bar_reaches_now() -> None:
    events = golden("stuck")
    last = events[-1].event_time.ToMilliseconds()
    t = build_timeline(events, now_ms=last + 5_000)
    (bar,) = (lane.bars[0] for lane in t.lanes)
    assert (bar.status, bar.open, bar.closed_ms, bar.end_ms) == ("open", True, None, last + 5_000)
    assert t.status == "running" and t.end_ms == last + 5_000
    # Without now_ms the timeline ends at the last event; render's now_ms moves it on.
    assert build_timeline(events).now_ms == last
    later = parse(render_timeline_svg(t, now_ms=last + 50_000))
    (drawn,) = bars(later, "activity")
    assert "open" in classes(drawn)
    assert int(later.get("data-end-ms", "0")) == last + 50_000


def test_a_now_behind_the_history_never_cuts_it_off() -> None:
    # The UI's clock is not the database's: a "now" earlier than the last event (a UI
    # host whose clock is behind) must not end open bars before recorded events, nor
    # leave those events out of the default range.
    b = HistoryBuilder().started().task()
    b.add("activity_scheduled", seq=1, activity_type="charge", task_queue="q")
    b.add("signal_received", 10_000, signal_name="late")
    last = b.now
    for t in (build_timeline(b.events, now_ms=last - 5_000), build_timeline(b.events)):
        (bar,) = (lane.bars[0] for lane in t.lanes)
        assert (t.now_ms, bar.end_ms) == (last, last)
        root = parse(render_timeline_svg(t, now_ms=last - 8_000))
        assert root.get("data-end-ms") == str(last)
        drawn = [e for e in with_class(root, "mark") if e.get("data-kind") == "signal_received"]
        assert len(drawn) == 1, "the last event is inside the drawing"


def test_an_open_activity_shows_its_pending_attempts_from_describe() -> None:
    # The history records nothing of an open activity's attempts; describe's pending
    # activities say which attempt is due or running and how the last one failed.
    b = HistoryBuilder().started().task()
    b.add("activity_scheduled", seq=1, activity_type="charge", task_queue="q")
    b.add("activity_scheduled", seq=2, activity_type="ship", task_queue="q")
    b.add("activity_completed", 40, seq=2, attempt=1)
    pending = [
        service_pb2.PendingActivity(
            seq=1,
            activity_type="charge",
            state="waiting",
            attempt=3,
            last_failure=failure("TimeoutError", "gateway timed out"),
        ),
        # Closed in the history (a describe read before the completion) or unknown:
        # the history wins, nothing is invented.
        service_pb2.PendingActivity(seq=2, state="leased", attempt=2),
        service_pb2.PendingActivity(seq=9, state="queued", attempt=1),
    ]
    t = build_timeline(b.events, now_ms=b.now + 1_000, pending=pending)
    charge, ship = (lane.bars[0] for lane in t.lanes)
    assert [(a.number, a.outcome, a.failed) for a in charge.attempts] == [
        (1, "failed", True),
        (2, "failed", True),
        (3, "waiting", False),
    ]
    assert "TimeoutError: gateway timed out" in charge.attempts[1].message
    assert "attempt 3 waiting" in charge.title
    assert "attempt 2: TimeoutError: gateway timed out" in charge.title
    assert [(a.number, a.outcome) for a in ship.attempts] == [(1, "completed")]
    assert [lane.key for lane in t.lanes] == ["activity:1", "activity:2"]
    root = parse(render_timeline_svg(t))
    (bar,) = [e for e in bars(root, "activity") if e.get("data-lane") == "activity:1"]
    assert len(with_class(bar, "failed")) == 2 and "open" in classes(bar)
    assert build_timeline(b.events).lanes[0].bars[0].attempts == (), "without describe: none"


@pytest.mark.parametrize("name", ["checkout", "fulfil", "cancelled", "failed", "stuck"])
def test_the_svg_matches_its_golden_file(name: str) -> None:
    svg = render_timeline_svg(timeline_of(name))
    path = GOLDEN / f"{name}.svg"
    if REGENERATE:
        path.write_text(svg)
    assert svg == path.read_text(), f"regenerate with DURABLE_RPC_REGEN_GOLDEN=1 ({path})"
    assert render_timeline_svg(timeline_of(name)) == svg, "the same input draws the same SVG"


# -- every kind, partial histories, hostile names ------------------------------------------


def test_every_event_lands_on_a_lane_or_the_run_lane() -> None:
    b = HistoryBuilder().started()
    for kind in all_kinds():
        if kind != "workflow_started":
            b.add(kind, 10)
    b.events.append(unknown_kind_event(len(b.events) + 1, b.now + 10))
    t = build_timeline(b.events)
    placed = [m.event_id for m in t.marks] + [
        event_id for lane in t.lanes for bar in lane.bars for event_id in bar.event_ids
    ]
    assert sorted(placed) == [e.event_id for e in b.events]
    assert "unknown" in {m.kind for m in t.marks}
    assert {lane.kind for lane in t.lanes} == {"activity", "timer", "child"}
    parse(render_timeline_svg(t))


def test_a_partial_history_opens_a_lane_at_its_first_event() -> None:
    b = HistoryBuilder()
    b.add("activity_completed", seq=4, attempt=3)
    b.add("timer_fired", 100, seq=5)
    t = build_timeline(b.events)
    assert [(lane.key, lane.bars[0].status) for lane in t.lanes] == [
        ("activity:4", "completed"),
        ("timer:5", "fired"),
    ]
    assert t.lanes[0].bars[0].failed_attempts == 2
    parse(render_timeline_svg(t))


def test_an_empty_history_draws_a_note() -> None:
    root = parse(render_timeline_svg(build_timeline([])))
    assert "The history has no events yet." in [e.text for e in with_class(root, "note")]


def test_hostile_names_come_out_inert() -> None:
    evil = '<script>alert("x")</script>'
    b = HistoryBuilder().started(evil, workflow_id=f"id-{evil}")
    b.task()
    b.add(
        "activity_scheduled",
        seq=1,
        activity_type='"><script>alert(1)</script>\x01',
        task_queue=evil,
    )
    b.add("activity_failed", 50, seq=1, attempt=2, failure=failure(evil, f"{evil} & <b>"))
    b.add("signal_received", 5, signal_name=evil)
    svg = render_timeline_svg(build_timeline(b.events))
    root = parse(svg)  # well-formed: the control character did not break the XML
    assert not [e for e in root.iter() if e.tag.lower().endswith("script")]
    assert "<script" not in svg and "&lt;script&gt;" in svg
    texts = "".join(root.itertext())
    assert evil in texts, "the name is shown, as text"
    assert "\ufffd" in texts and "\x01" not in svg


# -- zoom, caps, bad input -------------------------------------------------------------------


def activities(
    n: int, *, spacing_ms: int = 1000, length_ms: int = 500
) -> list[history_pb2.HistoryEvent]:
    b = HistoryBuilder().started()
    for seq in range(1, n + 1):
        b.task(5)
        b.add("activity_scheduled", 0, seq=seq, activity_type=f"step{seq}", task_queue="q")
        b.add("activity_completed", length_ms, seq=seq, attempt=1)
        b.now += spacing_ms - length_ms
    b.task(5)
    b.add("workflow_completed")
    return b.events


def test_zoom_clips_bars_and_hides_lanes_with_nothing_in_range() -> None:
    t = build_timeline(activities(10))
    # 2.2 s .. 4.3 s after the start: activity 3 (2.015-2.515 s: cut on the left), 4
    # (3.02-3.52 s) and 5 (4.025-4.525 s: cut on the right).
    lo, hi = T0 + 2_200, T0 + 4_300
    root = parse(render_timeline_svg(t, start_ms=lo, end_ms=hi))
    shown = bars(root, "activity")
    assert [e.get("data-lane") for e in shown] == ["activity:3", "activity:4", "activity:5"]
    assert [e.get("data-clipped") for e in shown] == ["left", None, "right"]
    notes = [e.text for e in with_class(root, "note")]
    assert notes == ["7 lane(s) with nothing in this time range are hidden."]
    assert (root.get("data-start-ms"), root.get("data-end-ms")) == (str(lo), str(hi))
    x_end = 1100 - 14
    for rect in root.iter(f"{SVG}rect"):
        if "segment" in classes(rect):
            assert float(rect.get("x", "0")) + float(rect.get("width", "0")) <= x_end + 0.05


def test_ticks_are_readable_at_every_zoom() -> None:
    t = build_timeline(activities(3))
    for lo, hi, sample in [
        (T0, T0 + 40, "14:40:00.010"),  # milliseconds
        (T0, T0 + 30_000, "14:40:05"),  # seconds
        (T0, T0 + 3 * 3_600_000, "15:00"),  # hours
        (T0, T0 + 20 * 86_400_000, "2025-12-04"),  # weeks
    ]:
        root = parse(render_timeline_svg(t, start_ms=lo, end_ms=hi))
        labels = [e.text for e in root.iter(f"{SVG}text") if e.get("text-anchor")]
        assert sample in labels, (sample, labels)
        assert 3 <= len(labels) <= 12


def test_lanes_beyond_the_cap_collapse_into_one_more_lane() -> None:
    t = build_timeline(activities(1000))
    svg = render_timeline_svg(t)
    root = parse(svg)
    assert len(bars(root, "activity")) == 100
    (more,) = [e for e in with_class(root, "lane") if e.get("data-kind") == "more"]
    assert more.get("data-count") == "900"
    assert "+900 more" in "".join(more.itertext())
    assert with_class(more, "density"), "where the collapsed lanes' bars fall"
    assert len(svg) < 120_000, f"{len(svg)} bytes for 1,000 activities"
    # Zooming in shows the collapsed ones.
    late = parse(render_timeline_svg(t, start_ms=T0 + 900_000, end_ms=T0 + 905_000))
    # Activity k is scheduled about 1.005 s * (k - 1) after the start.
    assert [e.get("data-lane") for e in bars(late, "activity")] == [
        f"activity:{k}" for k in range(897, 902)
    ]
    assert not [e for e in with_class(late, "lane") if e.get("data-kind") == "more"]
    assert render_timeline_svg(t, max_lanes=2000).count('data-kind="activity"') >= 1000


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"start_ms": T0 + 10, "end_ms": T0 + 10}, "INVALID_TIME_RANGE"),
        ({"start_ms": T0 + 10, "end_ms": T0}, "INVALID_TIME_RANGE"),
        ({"width": 100}, "INVALID_WIDTH"),
        ({"width": 10**6}, "INVALID_WIDTH"),
        ({"max_lanes": 0}, "INVALID_LANE_CAP"),
    ],
)
def test_bad_input_is_refused_with_a_reason(kwargs: dict[str, int], reason: str) -> None:
    with pytest.raises(TimelineError) as caught:
        render_timeline_svg(build_timeline(activities(2)), **kwargs)  # type: ignore[arg-type]
    assert caught.value.reason == reason and caught.value.message


def test_a_phone_width_drawing_keeps_its_labels_inside() -> None:
    root = parse(render_timeline_svg(timeline_of("checkout"), width=360))
    assert root.get("width") == "360"
    for text in root.iter(f"{SVG}text"):
        assert float(text.get("x", "0")) <= 360
