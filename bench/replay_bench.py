"""Replay benchmark: the cost of a workflow task on a long history.

The history is a long-lived run's usual shape: one run receiving signals (``Signals`` below,
one handler incrementing a counter, the main coroutine waiting for the target), the
signals arriving in bursts of ``--burst`` while workflow tasks run, so ~``--events``
events in about ``events / burst`` recorded workflow tasks. Figures:

- ``core``: the Rust replay machine alone (``_core.replay_core_bench``: each recorded
  task completed with its recorded commands, no Python in the loop), events/s with and
  without decoding the History protobuf;
- ``replayer_cold``: ``durable_rpc.testing.Replayer`` on the completed run's history;
- ``worker_cold``: a claimed workflow task of the open run (its last burst not decided
  yet) on a worker that never saw it: the PollWorkflowTaskResponse decoded from its
  bytes (as gRPC hands it over) and decided through ``decide_task``, the worker's code;
- ``warm``: the same run's next task on a worker that kept its instance, one new signal,
  at ``--events`` and at a tenth of it (flat = O(new events)). ``decide_ms`` is the
  worker's work on the decoded task; ``with_decode_ms`` adds decoding the response,
  whose whole history the server still sends (O(history), in C).

Each figure is the best and the median of ``--repeat`` runs (milliseconds).

    python bench/replay_bench.py [--events 10000] [--repeat 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from durable_rpc import _core, payload, workflow
from durable_rpc.testing import Replayer
from durable_rpc.v1 import history_pb2, service_pb2, workflow_task_pb2
from durable_rpc.worker._live_runs import LiveRun
from durable_rpc.worker._workflow_task import decide_task
from durable_rpc.workflow import definition_of

RUN_ID = "00000000-0000-4000-8000-000000000014"
TASK_QUEUE = "replay-bench"


@workflow.defn(name="ReplayBenchSignals")
class Signals:
    def __init__(self) -> None:
        self.n = 0

    @workflow.signal
    def tick(self, i: int) -> None:
        self.n += 1

    @workflow.run
    async def run(self, target: int) -> int:
        await workflow.wait_condition(lambda: self.n >= target)
        return self.n


def _event(history: history_pb2.History, ms: int) -> history_pb2.HistoryEvent:
    event = history.events.add(event_id=len(history.events) + 1)
    event.event_time.FromMilliseconds(ms)
    return event


def _marker(history: history_pb2.History, ms: int) -> None:
    """A workflow task that saw every event so far and decided nothing."""
    last_seen = len(history.events)
    marker = _event(history, ms).workflow_task_completed
    marker.last_seen_event_id = last_seen
    marker.workflow_time.FromMilliseconds(ms)


def signal_history(
    events: int, *, burst: int = 400, complete: bool = False, target: int | None = None
) -> history_pb2.History:
    """A ``Signals`` run's history of about ``events`` events: the start, bursts of
    ``burst`` signals each followed by the workflow task that saw them, and (with
    ``complete``) the completion once ``target`` signals arrived. Open runs wait for
    ``target`` (default: more than they got)."""
    history = history_pb2.History()
    ms = 1_764_000_000_000
    signals = max(1, events - 2 - (events // (burst + 1)) - (1 if complete else 0))
    if target is None:
        target = signals if complete else signals + 1_000_000
    started = _event(history, ms).workflow_started
    started.workflow_type = "ReplayBenchSignals"
    started.workflow_id = "replay-bench"
    started.run_id = RUN_ID
    started.task_queue = TASK_QUEUE
    started.input.data = payload.encode([target])
    _marker(history, ms)
    sent = 0
    while sent < signals:
        for _ in range(min(burst, signals - sent)):
            ms += 1
            signal = _event(history, ms).signal_received
            signal.signal_name = "tick"
            signal.input.data = payload.encode([sent])
            sent += 1
        _marker(history, ms)
    if complete:
        _event(history, ms).workflow_completed.result.data = payload.encode(sent)
    return history


def _signal(history: history_pb2.History, ms: int, n: int) -> None:
    signal = _event(history, ms).signal_received
    signal.signal_name = "tick"
    signal.input.data = payload.encode([n])


def _poll_response(history: history_pb2.History, ms: int) -> bytes:
    """The PollWorkflowTaskResponse bytes of a task claimed at ``ms`` on ``history``."""
    task = service_pb2.PollWorkflowTaskResponse(
        task_id=1,
        workflow_id="replay-bench",
        run_id=RUN_ID,
        workflow_type="ReplayBenchSignals",
        history=history,
        history_length=len(history.events),
    )
    task.workflow_time.FromMilliseconds(ms)
    return task.SerializeToString()


def _decide(raw: bytes, live: LiveRun | None) -> LiveRun:
    """What the worker does with a claimed task: decode, decide; the run kept after."""
    task = service_pb2.PollWorkflowTaskResponse.FromString(raw)
    decided = decide_task(definition_of(Signals), task, live, task_queue=TASK_QUEUE)
    decided.run.sent = workflow_task_pb2.ActivationCompletion(
        commands=decided.decision.commands
    ).SerializeToString()
    if live is not None and not decided.continued:
        raise AssertionError(f"the warm task replayed cold: {decided.diverged}")
    return decided.run


def _ms(samples: list[float]) -> dict[str, float]:
    return {
        "best_ms": round(min(samples) * 1e3, 3),
        "median_ms": round(statistics.median(samples) * 1e3, 3),
    }


def _timed(fn: Callable[[], object], repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


def measure_core(history: bytes, repeat: int) -> dict[str, Any]:
    iterations = 20
    rates, replay_rates = [], []
    for _ in range(repeat):
        events, decode_s, replay_s = _core.replay_core_bench(history, iterations)
        rates.append(events / (decode_s + replay_s))
        replay_rates.append(events / replay_s)
    return {
        "events_per_s": round(statistics.median(rates)),
        "events_per_s_best": round(max(rates)),
        "replay_only_events_per_s": round(statistics.median(replay_rates)),
    }


def measure_warm(events: int, repeat: int, burst: int) -> dict[str, Any]:
    """A run of ``events`` events kept on the worker; each task adds one signal."""
    history = signal_history(events, burst=burst)
    ms = history.events[-1].event_time.ToMilliseconds()
    # The worker decided the last recorded task itself: replay the events it saw.
    del history.events[-1]
    live = _decide(_poll_response(history, ms), None)
    decide_s: list[float] = []
    decode_s: list[float] = []
    for n in range(repeat + 2):
        _marker(history, ms)  # the decision the server recorded
        ms += 10
        _signal(history, ms, n)
        raw = _poll_response(history, ms)
        started = time.perf_counter()
        task = service_pb2.PollWorkflowTaskResponse.FromString(raw)
        decoded = time.perf_counter()
        decided = decide_task(definition_of(Signals), task, live, task_queue=TASK_QUEUE)
        done = time.perf_counter()
        if not decided.continued:
            raise AssertionError(f"the warm task replayed cold: {decided.diverged}")
        decided.run.sent = workflow_task_pb2.ActivationCompletion(
            commands=decided.decision.commands
        ).SerializeToString()
        live = decided.run
        if n >= 2:  # the first tasks warm up the interpreter's caches
            decide_s.append(done - decoded)
            decode_s.append(done - started)
    return {
        "history_events": len(history.events),
        "decide": _ms(decide_s),
        "with_decode": _ms(decode_s),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="history length")
    parser.add_argument("--burst", type=int, default=400, help="signals per workflow task")
    parser.add_argument("--repeat", type=int, default=7, help="runs per figure")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args()

    complete = signal_history(args.events, burst=args.burst, complete=True)
    replayer = Replayer([Signals])
    # The open run: the last burst arrived and no task decided it yet.
    open_run = signal_history(args.events, burst=args.burst)
    del open_run.events[-1]
    claimed = _poll_response(open_run, open_run.events[-1].event_time.ToMilliseconds() + 5)
    result: dict[str, Any] = {
        "benchmark": "replay",
        "history_events": len(complete.events),
        "core": measure_core(complete.SerializeToString(), args.repeat),
        "replayer_cold": _ms(_timed(lambda: replayer.replay(complete), args.repeat)),
        "worker_cold": _ms(_timed(lambda: _decide(claimed, None), args.repeat)),
        "warm": {
            str(n): measure_warm(n, args.repeat, args.burst)
            for n in (args.events // 10, args.events)
        },
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    core = result["core"]
    print(f"history: {result['history_events']} events (signals in bursts of {args.burst})")
    print(
        f"rust core alone: {core['events_per_s']:,} events/s with protobuf decode "
        f"(best {core['events_per_s_best']:,}), {core['replay_only_events_per_s']:,} "
        "events/s replay only"
    )
    for name in ("replayer_cold", "worker_cold"):
        figure = result[name]
        print(f"{name}: best {figure['best_ms']} ms, median {figure['median_ms']} ms")
    for warm in result["warm"].values():
        print(
            f"warm task at {warm['history_events']} events: decide median "
            f"{warm['decide']['median_ms']} ms (best {warm['decide']['best_ms']}), with "
            f"response decode median {warm['with_decode']['median_ms']} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
