"""Live workflow instances kept between a run's tasks (sticky execution), through a real
server and real workers: a task of a kept run applies only the new events and decides
exactly what a replay from event 1 decides."""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest

from durable_rpc import Client, StickyCacheOptions, Worker, activity, workflow
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import history_pb2, service_pb2, workflow_task_pb2
from durable_rpc.worker import _worker as worker_module
from durable_rpc.worker._inline import StickyRun, task_history_bytes
from durable_rpc.worker._live_runs import LiveRun, LiveRuns
from durable_rpc.worker._workflow_task import TaskDecision, decide_task
from durable_rpc.workflow import definition_of
from tests.e2e.conftest import eventually

TIMEOUT = timedelta(seconds=10)


@pytest.fixture(autouse=True)
def keep_short_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """These runs have tens of events, below the worker's LIVE_MIN_EVENTS: keep them
    anyway, to exercise the mechanism (test_short_runs_keep_no_instance checks the
    threshold itself)."""
    monkeypatch.setattr(worker_module, "LIVE_MIN_EVENTS", 0)


INPUTS = ("signal_received", "activity_completed")


@activity.defn
async def double(n: int) -> int:
    return 2 * n


@workflow.defn(name="LiveTally")
class LiveTally:
    """Each batch of signals: a side effect, an activity, a timestamped entry."""

    def __init__(self) -> None:
        self.got: list[int] = []
        self.done = False

    @workflow.signal
    def add(self, n: int) -> None:
        self.got.append(n)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    def more_than(self, seen: int) -> bool:
        return len(self.got) > seen or self.done

    @workflow.run
    async def run(self) -> list[str]:
        seen = 0
        log: list[str] = []
        while True:
            await workflow.wait_condition(functools.partial(self.more_than, seen))
            if len(self.got) == seen:
                return log
            batch, seen = sum(self.got[seen:]), len(self.got)
            salt = workflow.side_effect(lambda: workflow.random().randint(0, 9))
            doubled = await workflow.execute_activity(
                double, batch + salt, start_to_close_timeout=TIMEOUT
            )
            log.append(f"{doubled}@{workflow.now().isoformat()}")


@workflow.defn(name="LiveSum")
class LiveSum(LiveTally):
    """LiveTally without reading the clock after an activity: decidable inline."""

    @workflow.run
    async def run(self) -> list[str]:
        seen = 0
        log: list[str] = []
        while True:
            await workflow.wait_condition(functools.partial(self.more_than, seen))
            if len(self.got) == seen:
                return log
            batch, seen = sum(self.got[seen:]), len(self.got)
            doubled = await workflow.execute_activity(double, batch, start_to_close_timeout=TIMEOUT)
            log.append(str(doubled))


def settled(events: list[history_pb2.HistoryEvent], activities: int) -> bool:
    """``activities`` activities completed and every input event was decided on."""
    kinds = [e.WhichOneof("attributes") for e in events]
    if kinds.count("activity_completed") != activities:
        return False
    last_input = max(i for i, k in enumerate(kinds) if k in INPUTS or i == 0)
    return "workflow_task_completed" in kinds[last_input:]


async def drive(client: Client, workflow_id: str, signals: range) -> None:
    """One signal at a time, each decided before the next: the same tasks every time."""
    handle = client.get_handle(workflow_id)
    for n in signals:
        await handle.signal(LiveTally.add, n)

        async def decided(count: int = n + 1) -> bool:
            return settled(await handle.history(), count)

        await eventually(decided, what=f"signal {n} decided")


def shape(events: list[history_pb2.HistoryEvent]) -> list[tuple[str | None, int]]:
    return [
        (
            e.WhichOneof("attributes"),
            e.workflow_task_completed.last_seen_event_id
            if e.HasField("workflow_task_completed")
            else 0,
        )
        for e in events
    ]


def tally_worker(client: Client, sticky: int) -> Worker:
    return Worker(
        client,
        task_queue="live",
        workflows=[LiveTally, LiveSum],
        activities=[double],
        sticky_cache=StickyCacheOptions(max_entries=sticky),
    )


async def run_tally(
    env: WorkflowEnvironment, workflow_id: str, sticky: int
) -> tuple[list[str], list[history_pb2.HistoryEvent], int]:
    async with tally_worker(env.client, sticky) as worker:
        handle = await env.client.start_workflow(LiveTally.run, id=workflow_id, task_queue="live")
        await drive(env.client, workflow_id, range(6))
        await handle.signal(LiveTally.finish)
        result = await handle.result(timeout=30)
        events = await handle.history()
        hits = worker.live_runs.hits if worker.live_runs is not None else 0
        # A closed run is not kept.
        assert worker.live_runs is None or len(worker.live_runs) == 0
    return result, events, hits


async def test_kept_instances_decide_what_a_full_replay_decides() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        kept_result, kept_events, hits = await run_tally(env, "kept", 1000)
        cold_result, cold_events, cold_hits = await run_tally(env, "cold", 0)
    # Every signal's task continued the kept instance (the first task has none yet).
    assert hits >= 6
    assert cold_hits == 0
    assert shape(kept_events) == shape(cold_events)
    assert len(kept_result) == len(cold_result) == 6
    # Each recorded decision is what a replay from event 1 produces, task by task.
    Replayer([LiveTally]).replay(history_pb2.History(events=kept_events))


async def test_a_restarted_worker_replays_cold_and_continues() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        async with tally_worker(env.client, 1000) as first:
            handle = await env.client.start_workflow(LiveTally.run, id="restart", task_queue="live")
            await drive(env.client, "restart", range(3))
            assert first.live_runs is not None and first.live_runs.hits >= 2
        # Stopping dropped every kept instance; the new worker has none.
        assert len(first.live_runs) == 0
        async with tally_worker(env.client, 1000) as second:
            await drive(env.client, "restart", range(3, 6))
            await handle.signal(LiveTally.finish)
            result = await handle.result(timeout=30)
            assert second.live_runs is not None
            # Its first task replayed cold (nothing kept to diverge from), the rest continued.
            assert second.live_runs.forced_cold_replays == 0
            assert second.live_runs.hits >= 2
        events = await handle.history()
    assert len(result) == 6
    Replayer([LiveTally]).replay(history_pb2.History(events=events))


def _task_before(
    events: list[history_pb2.HistoryEvent], marker: history_pb2.HistoryEvent, time_ms: int
) -> service_pb2.PollWorkflowTaskResponse:
    """The workflow task ``marker`` recorded: the events it saw, claimed at ``time_ms``."""
    seen = marker.workflow_task_completed.last_seen_event_id
    task = service_pb2.PollWorkflowTaskResponse(
        workflow_type="LiveTally",
        run_id=events[0].workflow_started.run_id,
        history=history_pb2.History(events=events[:seen]),
    )
    task.workflow_time.FromMilliseconds(time_ms)
    return task


def _decide(
    task: service_pb2.PollWorkflowTaskResponse, live: LiveRun | None = None
) -> TaskDecision:
    decided = decide_task(definition_of(LiveTally), task, live, task_queue="live")
    decided.run.sent = workflow_task_pb2.ActivationCompletion(
        commands=decided.decision.commands
    ).SerializeToString()
    return decided


async def test_a_history_that_does_not_continue_the_kept_instance_is_replayed_cold() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        _, events, _ = await run_tally(env, "recorded", 0)
    markers = [e for e in events if e.HasField("workflow_task_completed")]
    # A task in the middle that records commands (its event after the marker is one),
    # and the task before it, after which a worker kept the instance.
    j = next(
        j
        for j in range(2, len(markers))
        if events[markers[j].event_id].WhichOneof("attributes") == "marker_recorded"
    )
    kept_at, next_at = markers[j - 1], markers[j]
    recorded_ms = kept_at.workflow_task_completed.workflow_time.ToMilliseconds()
    next_ms = next_at.workflow_task_completed.workflow_time.ToMilliseconds()
    next_task = _task_before(events, next_at, next_ms)
    cold = _decide(next_task)
    assert cold.decision.commands  # the task decides something: a real comparison

    # Kept after deciding task 4 at another time than the one recorded: another claim
    # (another worker's) recorded it, so the kept instance is not what history says.
    superseded = _decide(_task_before(events, kept_at, recorded_ms + 5_000))
    after = _decide(next_task, superseded.run)
    assert not after.continued
    assert after.diverged is not None and "another time" in after.diverged
    assert list(after.decision.commands) == list(cold.decision.commands)

    # Kept with a decision history recorded: continued, and the same commands.
    kept = _decide(_task_before(events, kept_at, recorded_ms))
    warm = _decide(next_task, kept.run)
    assert warm.continued and warm.diverged is None
    assert list(warm.decision.commands) == list(cold.decision.commands)


async def test_the_least_recently_used_instance_is_dropped_past_the_capacity() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        _, events, _ = await run_tally(env, "recorded", 0)
    first = next(e for e in events if e.HasField("workflow_task_completed"))
    ms = first.workflow_task_completed.workflow_time.ToMilliseconds()
    runs = LiveRuns(StickyCacheOptions(max_entries=2))
    for run_id in ("a", "b", "c"):
        runs.keep(run_id, _decide(_task_before(events, first, ms)).run)
    assert len(runs) == 2
    assert runs.take("a") is None
    assert runs.take("c") is not None and runs.take("c") is None  # taken out for a task


async def test_a_kept_history_is_extended_with_only_the_new_events() -> None:
    async with await WorkflowEnvironment.start_local() as env:
        _, events, _ = await run_tally(env, "recorded", 0)
    task = service_pb2.PollWorkflowTaskResponse(history=history_pb2.History(events=events))
    whole = task.history.SerializeToString()

    def kept(known: int) -> StickyRun:
        prefix = history_pb2.History(events=events[:known]).SerializeToString()
        return StickyRun("recorded", "LiveTally", "", prefix, known, {})

    # The kept bytes plus the rest are the whole history, byte for byte.
    assert task_history_bytes(task, kept(len(events) // 2)) == whole
    assert task_history_bytes(task, kept(len(events))) == whole
    # Nothing kept, or a kept copy longer than the task's history: serialized whole.
    assert task_history_bytes(task, None) == whole
    longer = kept(len(events))
    longer.history_length += 1
    assert task_history_bytes(task, longer) == whole


async def test_past_the_inline_limit_a_kept_run_decides_on_its_live_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Inline decisions replay from event 1; past the limit the ordinary task (claimed
    # with the activity completion) continues the kept instance instead.
    monkeypatch.setattr(worker_module, "INLINE_MAX_EVENTS", 8)
    async with await WorkflowEnvironment.start_local() as env:
        async with tally_worker(env.client, 1000) as worker:
            handle = await env.client.start_workflow(
                LiveSum.run, id="past-limit", task_queue="live"
            )
            await drive(env.client, "past-limit", range(6))
            await handle.signal(LiveTally.finish)
            result = await handle.result(timeout=30)
            assert worker.live_runs is not None
            hits = worker.live_runs.hits
        events = await handle.history()
    assert worker.report is not None
    # Only the first activity's task (history still short) was decided inline; every
    # other task after the first continued the kept instance.
    assert worker.report.inline_workflow_tasks <= 1
    assert hits >= 11
    assert len(result) == 6
    Replayer([LiveSum]).replay(history_pb2.History(events=events))


@workflow.defn(name="LiveHello")
class LiveHello:
    @workflow.run
    async def run(self, name: str) -> str:
        first = await workflow.execute_activity(double, len(name), start_to_close_timeout=TIMEOUT)
        second = await workflow.execute_activity(double, first, start_to_close_timeout=TIMEOUT)
        return f"{name}:{second}"


async def test_runs_closed_by_inline_decisions_leave_no_live_instance() -> None:
    # A hello workflow's last decision is made inline; its kept instance must go with it
    # (1,000 stale instances of short runs would be ~15 MB of a worker).
    async with (
        await WorkflowEnvironment.start_local() as env,
        Worker(
            env.client, task_queue="hello", workflows=[LiveHello], activities=[double]
        ) as worker,
    ):
        for n in range(5):
            handle = await env.client.start_workflow(
                LiveHello.run, f"run{n}", id=f"hello-{n}", task_queue="hello"
            )
            assert await handle.result(timeout=30) == f"run{n}:16"
        live = worker.live_runs
        assert live is not None
        # The result can reach the client before the completion's answer reaches the
        # worker; once it has, nothing of the closed runs is kept.
        await eventually(lambda: len(live) == 0, timeout=5, what="closed runs dropped")
    assert worker.report is not None and worker.report.inline_workflow_tasks == 10


async def test_short_runs_keep_no_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    # The default threshold: a run of tens of events is replayed cold (cheaper than the
    # memory an instance holds); the mechanism above is the same past it.
    monkeypatch.setattr(worker_module, "LIVE_MIN_EVENTS", 100)
    async with (
        await WorkflowEnvironment.start_local() as env,
        tally_worker(env.client, 1000) as worker,
    ):
        await env.client.start_workflow(LiveTally.run, id="short", task_queue="live")
        await drive(env.client, "short", range(3))
        assert worker.live_runs is not None
        assert len(worker.live_runs) == 0 and worker.live_runs.hits == 0
