"""The web UI's run-page drawing cost: folding a history into a timeline, drawing its SVG
and building the event list, for a run of N activities (a workflow task, a schedule and
a close each; every 10th activity retried once, every 50th failed for good).

Reports the median of --repeat rounds, in milliseconds, and the SVG's size in bytes for
the whole run and for a one-minute zoom (lanes past the cap collapse into "+N more").

    python bench/ui_timeline.py [--json] [--activities 1000 10000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from durable_rpc import payload
from durable_rpc.ui._timeline import build_timeline, render_timeline_svg
from durable_rpc.ui._values import event_summaries
from durable_rpc.v1 import history_pb2, payload_pb2

T0 = 1_764_600_000_000


def history(n: int) -> list[history_pb2.HistoryEvent]:
    events: list[history_pb2.HistoryEvent] = []
    now = T0

    def add(kind: str, after_ms: int, **fields: Any) -> history_pb2.HistoryEvent:
        nonlocal now
        now += after_ms
        event = history_pb2.HistoryEvent(event_id=len(events) + 1)
        event.event_time.FromMilliseconds(now)
        attrs = getattr(event, kind)
        attrs.SetInParent()
        for name, value in fields.items():
            if isinstance(value, payload_pb2.Payload | payload_pb2.Failure):
                getattr(attrs, name).CopyFrom(value)
            else:
                setattr(attrs, name, value)
        events.append(event)
        return event

    arg = payload_pb2.Payload(data=payload.encode([{"order": "o-1", "amount": 1250}]))
    add("workflow_started", 0, workflow_type="Bulk", workflow_id="bulk-1", run_id="r", input=arg)
    for seq in range(1, n + 1):
        add("workflow_task_completed", 5, worker_id="w1")
        add("activity_scheduled", 0, seq=seq, activity_type=f"step_{seq % 7}", input=arg)
        if seq % 50 == 0:
            failure = payload_pb2.Failure(type="ValueError", message="bad row", stack_trace="x")
            add("activity_failed", 400, seq=seq, attempt=3, failure=failure)
        else:
            result = payload_pb2.Payload(data=payload.encode({"ok": True, "seq": seq}))
            add(
                "activity_completed", 400, seq=seq, attempt=2 if seq % 10 == 0 else 1, result=result
            )
    add("workflow_task_completed", 5, worker_id="w1")
    add("workflow_completed", 0)
    return events


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(statistics.median(times), 2)


def measure(n: int, repeat: int) -> dict[str, Any]:
    events = history(n)
    timeline = build_timeline(events)
    zoom = {"start_ms": T0 + 60_000, "end_ms": T0 + 120_000}
    return {
        "activities": n,
        "events": len(events),
        "build_ms": median_ms(lambda: build_timeline(events), repeat),
        "render_ms": median_ms(lambda: render_timeline_svg(timeline), repeat),
        "render_zoom_ms": median_ms(lambda: render_timeline_svg(timeline, **zoom), repeat),
        "event_list_ms": median_ms(lambda: event_summaries(events), repeat),
        "svg_bytes": len(render_timeline_svg(timeline).encode()),
        "svg_zoom_bytes": len(render_timeline_svg(timeline, **zoom).encode()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    if args.repeat < 1 or any(n < 1 for n in args.activities):
        parser.error("--repeat and --activities must be at least 1")
    results = [measure(n, args.repeat) for n in args.activities]
    if args.json:
        print(json.dumps({"benchmark": "ui_timeline", "repeat": args.repeat, "runs": results}))
        return
    for r in results:
        print(
            f"{r['activities']:>6} activities ({r['events']} events): "
            f"build {r['build_ms']} ms, svg {r['render_ms']} ms ({r['svg_bytes']} B), "
            f"1-min zoom {r['render_zoom_ms']} ms ({r['svg_zoom_bytes']} B), "
            f"event list {r['event_list_ms']} ms"
        )


if __name__ == "__main__":
    main()
