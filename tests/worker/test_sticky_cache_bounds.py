"""The sticky cache's options and bounds, without a server: ``StickyCacheOptions``
validation, ``BoundedCache`` (entries, bytes, TTL on an injected clock) and ``LiveRuns``
with real replayed instances. tests/features/test_sticky_cache.py runs them for real."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durable_rpc import StickyCacheMetrics, StickyCacheOptions, Worker, workflow
from durable_rpc.v1 import history_pb2, service_pb2
from durable_rpc.worker import StickyCacheOptionsError
from durable_rpc.worker._live_runs import LiveRun, LiveRuns
from durable_rpc.worker._sticky_cache import BoundedCache
from durable_rpc.worker._workflow_task import decide_task
from durable_rpc.workflow import definition_of
from tests.worker.test_registration import DeadServerClient


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"max_entries": -1}, "max_entries"),
        ({"max_entries": True}, "max_entries"),
        ({"max_entries": 2.5}, "max_entries"),
        ({"max_history_bytes": 0}, "max_history_bytes"),
        ({"max_history_bytes": -5}, "max_history_bytes"),
        ({"ttl": timedelta(0)}, "ttl"),
        ({"ttl": timedelta(milliseconds=1500)}, "ttl"),
        ({"ttl": timedelta(seconds=3601)}, "ttl"),
        ({"ttl": 60}, "ttl"),
    ],
)
def test_options_out_of_range_are_refused_naming_the_option(
    options: dict[str, Any], option: str
) -> None:
    with pytest.raises(StickyCacheOptionsError, match=f"StickyCacheOptions.{option} ") as raised:
        StickyCacheOptions(**options)
    assert raised.value.option == option
    assert raised.value.reason == "INVALID_STICKY_CACHE_OPTIONS"
    assert isinstance(raised.value, ValueError)


def test_the_defaults_and_the_edges_are_accepted() -> None:
    default = StickyCacheOptions()
    assert (default.max_entries, default.max_history_bytes, default.ttl) == (
        1000,
        16 * 1024 * 1024,
        timedelta(seconds=300),
    )
    assert default.enabled and not StickyCacheOptions(max_entries=0).enabled
    StickyCacheOptions(ttl=timedelta(seconds=1))
    StickyCacheOptions(ttl=timedelta(hours=1), max_history_bytes=1)


def test_the_worker_takes_only_options() -> None:
    with pytest.raises(TypeError, match="StickyCacheOptions"):
        Worker(
            DeadServerClient("127.0.0.1:9"),
            task_queue="q",
            workflows=[Tiny],
            sticky_cache=32,  # type: ignore[arg-type]
        )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cache(clock: Clock, dropped: list[str], **options: Any) -> BoundedCache[str]:
    return BoundedCache(StickyCacheOptions(**options), dropped.append, clock)


def test_past_max_entries_the_least_recently_used_goes() -> None:
    dropped: list[str] = []
    c = cache(Clock(), dropped, max_entries=2)
    c.put("a", "A", 1)
    c.put("b", "B", 1)
    assert c.get("a") == "A"  # a read makes a the most recently used
    c.put("c", "C", 1)
    assert dropped == ["B"] and c.evictions == 1
    assert "b" not in c and "a" in c and "c" in c
    assert (len(c), c.history_bytes) == (2, 2)


def test_a_cache_of_no_entries_keeps_nothing() -> None:
    dropped: list[str] = []
    c = cache(Clock(), dropped, max_entries=0)
    c.put("a", "A", 1)
    assert (len(c), c.history_bytes, c.evictions, dropped) == (0, 0, 1, ["A"])


def test_past_the_byte_bound_the_least_recently_used_go_until_it_holds() -> None:
    dropped: list[str] = []
    c = cache(Clock(), dropped, max_history_bytes=100)
    c.put("a", "A", 40)
    c.put("b", "B", 40)
    c.put("c", "C", 20)
    assert (len(c), c.history_bytes, c.evictions) == (3, 100, 0)
    c.put("d", "D", 70)  # 170: a and b must go
    assert dropped == ["A", "B"] and c.evictions == 2
    assert (len(c), c.history_bytes) == (2, 90)
    # Replacing an entry re-counts its bytes (its old value is dropped, not evicted).
    c.put("c", "C2", 30)
    assert (c.history_bytes, c.evictions, dropped[-1]) == (100, 2, "C")


def test_an_entry_bigger_than_the_byte_bound_is_not_kept() -> None:
    dropped: list[str] = []
    c = cache(Clock(), dropped, max_history_bytes=100)
    c.put("a", "A", 10)
    c.put("big", "BIG", 101)
    assert "big" not in c and "a" in c
    assert (dropped, c.evictions, c.history_bytes) == (["BIG"], 1, 10)


def test_entries_expire_their_ttl_after_the_put_and_reads_do_not_extend_it() -> None:
    clock, dropped = Clock(), []
    c = cache(clock, dropped, ttl=timedelta(seconds=10))
    c.put("a", "A", 5)
    clock.now += 9
    assert c.get("a") == "A"  # read at 9 s: still there, its expiry unchanged
    clock.now += 1
    assert "a" not in c
    assert c.get("a") is None
    assert (dropped, c.evictions, len(c), c.history_bytes) == (["A"], 1, 0, 0)
    # take() of an expired entry evicts it too; a fresh put counts from its own time.
    c.put("b", "B", 5)
    clock.now += 10
    assert c.take("b") is None and c.evictions == 2
    c.put("c", "C", 5)
    clock.now += 5
    c.put("d", "D", 5)
    clock.now += 5  # c is 10 s old, d 5 s
    c.put("e", "E", 5)  # the put evicts the expired c at the front
    assert "c" not in c and "d" in c and c.evictions == 3


def test_sweep_evicts_expired_entries_wherever_reads_moved_them() -> None:
    clock, dropped = Clock(), []
    c = cache(clock, dropped, ttl=timedelta(seconds=10))
    c.put("a", "A", 1)
    clock.now += 5
    c.put("b", "B", 1)
    assert c.get("a") == "A"  # a is now the most recently used, and the oldest put
    clock.now += 5
    c.sweep()
    assert (dropped, len(c), c.evictions) == (["A"], 1, 1)


def test_forget_take_and_clear_are_not_evictions() -> None:
    dropped: list[str] = []
    c = cache(Clock(), dropped)
    c.put("a", "A", 3)
    c.put("b", "B", 4)
    c.put("c", "C", 5)
    assert c.take("a") == "A"  # its taker owns it: not dropped
    c.forget("b")
    c.clear()
    assert (dropped, c.evictions, len(c), c.history_bytes) == (["B", "C"], 0, 0, 0)


@workflow.defn(name="StickyTiny")
class Tiny:
    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


def live_run(run_id: str) -> LiveRun:
    """A real instance, replayed from a one-event history (26 encoded bytes)."""
    started = history_pb2.WorkflowStarted(workflow_type="StickyTiny", run_id=run_id)
    task = service_pb2.PollWorkflowTaskResponse(
        workflow_type="StickyTiny",
        run_id=run_id,
        history=history_pb2.History(
            events=[history_pb2.HistoryEvent(event_id=1, workflow_started=started)]
        ),
    )
    return decide_task(definition_of(Tiny), task, None, task_queue="q").run


def test_live_runs_account_for_their_consumed_history_and_count_evictions() -> None:
    clock = Clock()
    runs = LiveRuns(
        StickyCacheOptions(max_entries=2, max_history_bytes=60, ttl=timedelta(seconds=30)), clock
    )
    one = live_run("r-a")
    assert one.history_bytes == len(
        history_pb2.History(
            events=[
                history_pb2.HistoryEvent(
                    event_id=1,
                    workflow_started=history_pb2.WorkflowStarted(
                        workflow_type="StickyTiny", run_id="r-a"
                    ),
                )
            ]
        ).SerializeToString()
    )
    runs.keep("r-a", one)
    runs.keep("r-b", live_run("r-b"))
    assert runs.metrics() == StickyCacheMetrics(0, 0, 0, 0, 2, 2 * one.history_bytes)
    runs.keep("r-c", live_run("r-c"))  # past both bounds: r-a goes
    assert "r-a" not in runs and runs.metrics().evictions == 1
    assert runs.count(found=False, continued=False) == "miss"
    assert runs.count(found=True, continued=True) == "hit"
    assert runs.count(found=True, continued=False) == "diverged"
    clock.now += 30
    assert runs.metrics() == StickyCacheMetrics(1, 1, 3, 1, 0, 0)
