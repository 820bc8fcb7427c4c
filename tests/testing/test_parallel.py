"""workflow.parallel and workflow.selection on the time-skipping environment (a real
server and worker in this process): results in input order, a partial failure that
keeps the successes (ParallelFailure / ParallelCompletion), nested groups, a worker
replaced mid-group, a recorded selection winner that replay keeps, losers awaited or
cancelled through their handles, and validation before any command."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from durable_rpc import ApplicationError, Worker, activity, converter, workflow
from durable_rpc.client import WorkflowFailureError
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import history_pb2
from durable_rpc.worker._workflow_task import replay
from durable_rpc.workflow import (
    DurableOperationCancelled,
    ParallelFailure,
    ParallelGroupError,
)
from durable_rpc.workflow._definition import definition_of

pytestmark = pytest.mark.timeout(60)

MINUTE = timedelta(minutes=1)
#: asyncio events the activities wait on or set, by name (the worker runs in this loop).
GATES: dict[str, asyncio.Event] = {}


def gate(name: str) -> asyncio.Event:
    return GATES.setdefault(name, asyncio.Event())


@pytest.fixture(autouse=True)
def _fresh_gates() -> None:
    GATES.clear()


@activity.defn
async def echo(tag: str) -> str:
    gate(f"started:{tag}").set()
    if tag.startswith("held"):
        await gate(f"release:{tag}").wait()
    gate(f"done:{tag}").set()
    return f"ok:{tag}"


@activity.defn
async def breaks(tag: str) -> str:
    gate(f"done:{tag}").set()
    raise ApplicationError(f"{tag} broke", type="Broken", non_retryable=True)


@activity.defn
async def release(tag: str) -> None:
    gate(f"release:{tag}").set()


def act(tag: str, **kwargs: Any) -> Any:
    return workflow.execute_activity(echo, tag, start_to_close_timeout=MINUTE, **kwargs)


async def later(seconds: int, tag: str) -> str:
    await workflow.sleep(seconds)
    result: str = await act(tag)
    return result


def broken(tag: str) -> Any:
    return workflow.execute_activity(breaks, tag, start_to_close_timeout=MINUTE)


def summary(failure: ParallelFailure) -> dict[str, Any]:
    return {
        "path": list(failure.path),
        "error": str(failure.error.__cause__),
        "completions": [[list(c.path), c.result] for c in failure.completions],
        "failed": [list(f.path) for f in failure.failures],
        "message": str(failure),
    }


@workflow.defn(name="ParallelKid")
class Kid:
    @workflow.run
    async def run(self, tag: str) -> str:
        return f"kid:{await act(tag)}"


@workflow.defn(name="ParallelCases")
class ParallelCases:
    @workflow.run
    async def run(self, case: str) -> Any:
        if case == "order":
            # c finishes first and a last (the timers order them): the results still
            # come in input order.
            return await workflow.parallel([later(30, "a"), later(20, "b"), act("c")])
        if case == "keyed":
            return await workflow.parallel(
                x=act("x"),
                y=workflow.sleep(3600),
                z=workflow.execute_child_workflow(
                    Kid.run, "z", id=f"{workflow.info().workflow_id}-z"
                ),
            )
        if case == "fails":
            try:
                await workflow.parallel([act("a"), broken("b"), later(20, "c")])
            except ParallelFailure as failure:
                return summary(failure)
        if case == "nested":
            return await workflow.parallel(
                [act("a"), workflow.parallel(x=act("b"), y=workflow.sleep(3600))]
            )
        if case == "nested-fails":
            try:
                await workflow.parallel(
                    {"top": act("a"), "inner": workflow.parallel([act("b"), broken("c")])}
                )
            except ParallelFailure as failure:
                return summary(failure)
        if case == "restart":
            # b fails; c is held on another queue while the workflow worker is replaced.
            await workflow.parallel([act("a"), broken("b"), act("held-c", task_queue="q-held")])
        raise AssertionError(case)


async def yields_then_sleeps() -> str:
    # Two loop turns first, so the nested group's timer takes the earlier seq.
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await workflow.sleep(60)
    return "b"


@workflow.defn(name="SelectionCases")
class SelectionCases:
    @workflow.run
    async def run(self, case: str) -> Any:
        if case == "await-loser":
            sel = workflow.selection(fast=act("fast"), slow=act("held-slow"))
            first = await sel.first()
            # The loser is still running: released only now, then awaited.
            await workflow.execute_activity(release, "held-slow", start_to_close_timeout=MINUTE)
            late = await sel.handle("slow").result()
            return [first.key, first.value, sel.winner, late]
        if case == "cancel-loser":
            nobody = f"{workflow.info().task_queue}-nobody"
            sel = workflow.selection({"fast": act("fast"), "slow": act("never", task_queue=nobody)})
            first = await sel.first()
            handle = sel.handle("slow")
            cancelled = await handle.cancel()
            try:
                await handle.result()
            except DurableOperationCancelled as error:
                return [first.key, cancelled, error.key, str(error)]
            raise AssertionError("the cancelled loser returned")
        if case == "tie":
            # Two timers due at once end in one activation: the one whose TimerFired
            # comes first in history wins.
            sel = workflow.selection(a=workflow.sleep(60), b=workflow.sleep(60))
            await sel.first()
            await workflow.sleep(1)  # the winner's task is a replayed one below
            return sel.winner
        if case == "history-order":
            # Both timers fire in one activation, a's first; b's code ends first on the
            # loop (a nested group takes more steps) and b comes first in input order.
            sel = workflow.selection(
                b=yields_then_sleeps(), a=workflow.parallel([workflow.sleep(60)])
            )
            first = await sel.first()
            return [first.key, first.value]
        raise AssertionError(case)


@workflow.defn(name="SelectionCases")
class SwappedTie:
    """SelectionCases' "tie" with the members listed the other way round: replaying a
    recorded history, b's timer now has a's seq (and fires first), yet the recorded
    winner holds."""

    @workflow.run
    async def run(self, case: str) -> Any:
        sel = workflow.selection(b=workflow.sleep(60), a=workflow.sleep(60))
        await sel.first()
        await workflow.sleep(1)
        return sel.winner


@workflow.defn(name="BadGroups")
class BadGroups:
    @workflow.run
    async def run(self, case: str) -> str:
        try:
            if case == "empty":
                await workflow.parallel([])
            elif case == "duplicate-key":
                await workflow.parallel({"a": act("a")}, a=act("b"))
            elif case == "invalid-key":
                await workflow.parallel({"": act("a")})
            elif case == "not-awaitable":
                await workflow.parallel([act("a"), "b"])
            elif case == "duplicate-member":
                one = act("a")
                await workflow.parallel([one, one])
            elif case == "mixed":
                await workflow.parallel([act("a")], b=act("b"))
            elif case == "selection-empty":
                workflow.selection()
            elif case == "unknown-handle":
                workflow.selection(a=act("a")).handle("zzz")
        except ParallelGroupError as error:
            return error.reason
        raise AssertionError(case)


WORKFLOWS = [ParallelCases, SelectionCases, BadGroups, Kid]
ACTIVITIES = [echo, breaks, release]


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        yield env


async def run_case(
    env: WorkflowEnvironment, workflow_cls: Any, case: str
) -> tuple[Any, list[history_pb2.HistoryEvent]]:
    async with Worker(env.client, task_queue="q", workflows=WORKFLOWS, activities=ACTIVITIES):
        handle = await env.client.start_workflow(
            workflow_cls.run, case, id=f"{case}-{uuid.uuid4().hex[:6]}", task_queue="q"
        )
        result = await handle.result(timeout=30)
        events = list(await handle.history())
    replayed = Replayer(WORKFLOWS).replay(history_pb2.History(events=events))
    assert replayed.ok, replayed
    return result, events


def markers(events: list[history_pb2.HistoryEvent], kind: str) -> list[Any]:
    return [
        (
            e.marker_recorded.seq,
            e.marker_recorded.id,
            converter.decode(e.marker_recorded.payload.data),
        )
        for e in events
        if e.HasField("marker_recorded") and e.marker_recorded.kind == kind
    ]


def completed_tags(events: list[history_pb2.HistoryEvent]) -> list[str]:
    return [
        converter.decode(e.activity_completed.result.data)
        for e in events
        if e.HasField("activity_completed")
    ]


async def test_parallel_returns_results_in_input_order(env: WorkflowEnvironment) -> None:
    result, events = await run_case(env, ParallelCases, "order")
    assert result == ["ok:a", "ok:b", "ok:c"]
    assert completed_tags(events) == ["ok:c", "ok:b", "ok:a"], "completed the other way round"
    # The group's marker (seq 1) records its membership before the members' commands.
    assert markers(events, "parallel") == [(1, "", {"keys": [0, 1, 2], "parent": 0, "key": None})]
    started = [e.timer_started.seq for e in events if e.HasField("timer_started")]
    scheduled = [e.activity_scheduled.seq for e in events if e.HasField("activity_scheduled")]
    assert (started, scheduled) == ([2, 3], [4, 5, 6])  # a's timer, b's timer, c, b, a


async def test_a_keyed_group_returns_a_mapping_and_joins_a_timer_and_a_child(
    env: WorkflowEnvironment,
) -> None:
    result, events = await run_case(env, ParallelCases, "keyed")
    assert result == {"x": "ok:x", "y": None, "z": "kid:ok:z"}
    assert list(result) == ["x", "y", "z"]
    assert any(e.HasField("child_workflow_completed") for e in events)


async def test_a_failed_member_raises_parallel_failure_with_the_successes(
    env: WorkflowEnvironment,
) -> None:
    result, events = await run_case(env, ParallelCases, "fails")
    assert result["path"] == [1]
    assert result["failed"] == [[1]]
    assert result["completions"] == [[[0], "ok:a"], [[2], "ok:c"]]
    assert "b broke" in result["error"]
    assert result["message"].startswith("parallel member 1 failed: ActivityError: ")
    # The group waited for c, which finished after b had failed.
    kinds = [e.WhichOneof("attributes") for e in events]
    assert kinds.index("activity_failed") < max(
        i for i, k in enumerate(kinds) if k == "activity_completed"
    )
    assert not any(e.HasField("activity_cancel_requested") for e in events)


async def test_a_nested_group_keeps_its_shape_and_records_its_parent(
    env: WorkflowEnvironment,
) -> None:
    result, events = await run_case(env, ParallelCases, "nested")
    assert result == ["ok:a", {"x": "ok:b", "y": None}]
    (outer, inner) = markers(events, "parallel")
    assert outer == (1, "", {"keys": [0, 1], "parent": 0, "key": None})
    assert inner[2] == {"keys": ["x", "y"], "parent": 1, "key": 1}


async def test_a_nested_failure_reports_leaves_by_path(env: WorkflowEnvironment) -> None:
    result, _ = await run_case(env, ParallelCases, "nested-fails")
    assert result["path"] == ["inner", 1]
    assert result["completions"] == [[["top"], "ok:a"], [["inner", 0], "ok:b"]]
    assert result["message"].startswith("parallel member inner/1 failed: ")


async def test_a_worker_replaced_mid_group_ends_it_identically_to_a_replay(
    env: WorkflowEnvironment,
) -> None:
    held = Worker(env.client, task_queue="q-held", activities=ACTIVITIES)
    async with held:
        first = Worker(env.client, task_queue="q", workflows=WORKFLOWS, activities=ACTIVITIES)
        async with first:
            handle = await env.client.start_workflow(
                ParallelCases.run, "restart", id=f"restart-{uuid.uuid4().hex[:6]}", task_queue="q"
            )
            await gate("started:held-c").wait()
            await gate("done:a").wait()
        # The first worker is gone: the next task is a full replay on a new worker.
        async with Worker(env.client, task_queue="q", workflows=WORKFLOWS, activities=ACTIVITIES):
            gate("release:held-c").set()
            with pytest.raises(WorkflowFailureError, match="parallel member 1 failed"):
                await handle.result(timeout=30)
            events = list(await handle.history())
    failed = events[-1].workflow_failed.failure
    assert failed.type == "ParallelFailure"
    assert "(1 failed, 2 completed)" in failed.message
    # Replaying the history without its last task decides the same failure.
    last_task = max(i for i, e in enumerate(events) if e.HasField("workflow_task_completed"))
    history = history_pb2.History(events=events[:last_task]).SerializeToString()
    (command,) = replay(definition_of(ParallelCases), history, 0, task_queue="q")
    assert command.fail_workflow.failure.message == failed.message
    assert command.fail_workflow.failure.type == failed.type


async def test_selection_records_the_winner_and_a_loser_can_be_awaited(
    env: WorkflowEnvironment,
) -> None:
    result, events = await run_case(env, SelectionCases, "await-loser")
    assert result == ["fast", "ok:fast", "fast", "ok:held-slow"]
    assert markers(events, "selection") == [
        (1, "", {"keys": ["fast", "slow"], "parent": 0, "key": None})
    ]
    assert markers(events, "selection_winner") == [(4, "1", "fast")]
    assert not any(e.HasField("activity_cancel_requested") for e in events)


async def test_a_recorded_winner_that_has_not_ended_on_replay_is_nondeterminism(
    env: WorkflowEnvironment,
) -> None:
    _, events = await run_case(env, SelectionCases, "await-loser")
    (winner,) = [e for e in events if e.marker_recorded.kind == "selection_winner"]
    # As if the history said "slow" had won: at that point of the replay it is running.
    winner.marker_recorded.payload.data = converter.encode("slow")
    result = Replayer(WORKFLOWS, raise_on_failure=False).replay(history_pb2.History(events=events))
    assert result.nondeterminism is not None, result
    assert result.nondeterminism.seq == 4
    assert "key='slow'" in result.nondeterminism.expected
    assert "'slow' has not finished" in result.nondeterminism.actual


async def test_a_loser_cancelled_through_its_handle_raises_durable_operation_cancelled(
    env: WorkflowEnvironment,
) -> None:
    result, events = await run_case(env, SelectionCases, "cancel-loser")
    assert result == ["fast", True, "slow", "selection member 'slow' was cancelled"]
    (requested,) = [e for e in events if e.HasField("activity_cancel_requested")]
    assert requested.activity_cancel_requested.seq == 3
    assert completed_tags(events) == ["ok:fast"]


async def test_the_winner_is_the_first_to_end_in_history_order(
    env: WorkflowEnvironment,
) -> None:
    result, events = await run_case(env, SelectionCases, "history-order")
    assert result == ["a", [None]]
    fired = [e.timer_fired.seq for e in events if e.HasField("timer_fired")]
    assert fired == [3, 4]  # 2: a's group marker, 3: a's timer, 4: b's timer
    assert markers(events, "selection_winner") == [(5, "1", "a")]


async def test_replay_keeps_the_recorded_winner_when_the_code_would_pick_another(
    env: WorkflowEnvironment,
) -> None:
    result, events = await run_case(env, SelectionCases, "tie")
    assert result == "a"
    fired = [e.timer_fired.seq for e in events if e.HasField("timer_fired")]
    assert fired == [2, 3, 5]  # 5: the sleep after the selection
    assert markers(events, "selection_winner") == [(4, "1", "a")]
    last_task = max(i for i, e in enumerate(events) if e.HasField("workflow_task_completed"))
    # The winner's task, replayed with the members swapped: b now has seq 2 (fired
    # first) and would win, but the recorded winner is a.
    history = history_pb2.History(events=events[:last_task]).SerializeToString()
    commands = replay(definition_of(SwappedTie), history, 0, task_queue="q")
    assert [c.WhichOneof("kind") for c in commands][-1] == "complete_workflow"
    assert converter.decode(commands[-1].complete_workflow.result.data) == "a"


async def test_the_server_advertises_durable_selection(env: WorkflowEnvironment) -> None:
    async with Worker(env.client, task_queue="q", workflows=WORKFLOWS) as worker:
        assert "durable_selection" in worker.negotiated_capabilities


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("empty", "EMPTY_GROUP"),
        ("duplicate-key", "DUPLICATE_KEY"),
        ("invalid-key", "INVALID_KEY"),
        ("not-awaitable", "NOT_AWAITABLE"),
        ("duplicate-member", "DUPLICATE_MEMBER"),
        ("mixed", "MIXED_KEYS"),
        ("selection-empty", "EMPTY_GROUP"),
        ("unknown-handle", "UNKNOWN_KEY"),
    ],
)
async def test_an_invalid_group_is_refused_before_any_command(
    env: WorkflowEnvironment, case: str, reason: str
) -> None:
    result, events = await run_case(env, BadGroups, case)
    assert result == reason
    kinds = {e.WhichOneof("attributes") for e in events}
    if case == "unknown-handle":
        return  # the selection itself was valid and started
    assert not kinds & {"activity_scheduled", "marker_recorded", "timer_started"}
