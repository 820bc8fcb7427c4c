"""workflow.side_effect / patched / deprecate_patch on the time-skipping environment and
through the Replayer: values recorded once, old histories take the old branch, and a
reordered marker is a NondeterminismError with seq, expected and actual."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from durable_rpc import NondeterminismError, Worker, activity, workflow
from durable_rpc.testing import Replayer, ReplayFailedError, WorkflowEnvironment
from durable_rpc.v1 import history_pb2
from durable_rpc.worker._workflow_task import replay
from durable_rpc.workflow import WorkflowTaskError
from durable_rpc.workflow._definition import definition_of
from tests.testing.golden_workflows import GoldenMarkers

pytestmark = pytest.mark.timeout(60)

CALLS: list[str] = []


@dataclass
class Stamp:
    token: str
    at: datetime


def make_token() -> str:
    token = uuid.uuid4().hex
    CALLS.append(token)
    return token


def make_stamp() -> Stamp:
    return Stamp(make_token(), datetime(2024, 5, 1, tzinfo=UTC))


@activity.defn
async def old_charge(amount: int) -> str:
    return f"old:{amount}"


@activity.defn
async def new_charge(amount: int) -> str:
    return f"new:{amount}"


@workflow.defn(name="Tokens")
class Tokens:
    @workflow.run
    async def run(self) -> list[str]:
        first = workflow.side_effect(make_token)
        await workflow.sleep(timedelta(hours=1))
        stamp = workflow.side_effect(make_stamp)
        assert isinstance(stamp, Stamp) and stamp.at.tzinfo is not None
        number = workflow.side_effect(lambda: 7, result_type=int)
        await workflow.sleep(timedelta(hours=1))
        return [first, stamp.token, str(number)]


@workflow.defn(name="Tokens")
class TokensReordered:
    """Changed: the first side effect moved after the timer."""

    @workflow.run
    async def run(self) -> list[str]:
        await workflow.sleep(timedelta(hours=1))
        first = workflow.side_effect(make_token)
        return [first]


# --- one workflow type in four versions of its code ----------------------------------

BRANCHES: list[str] = []


@workflow.defn(name="Billing")
class BillingV1:
    """Before the change."""

    @workflow.run
    async def run(self, amount: int) -> str:
        await workflow.sleep(timedelta(minutes=5))
        charged = await workflow.execute_activity(
            old_charge, amount, start_to_close_timeout=timedelta(seconds=10)
        )
        return f"{charged} x{amount * 2}"


@workflow.defn(name="Billing")
class BillingV2:
    """The change, behind patched(): new activity and a new computation."""

    @workflow.run
    async def run(self, amount: int) -> str:
        await workflow.sleep(timedelta(minutes=5))
        if workflow.patched("new-charge"):
            BRANCHES.append("new")
            assert workflow.patched("new-charge"), "later calls repeat the first answer"
            charged = await workflow.execute_activity(
                new_charge, amount, start_to_close_timeout=timedelta(seconds=10)
            )
        else:
            BRANCHES.append("old")
            charged = await workflow.execute_activity(
                old_charge, amount, start_to_close_timeout=timedelta(seconds=10)
            )
        factor = 3 if workflow.patched("triple") else 2
        return f"{charged} x{amount * factor}"


@workflow.defn(name="Billing")
class BillingV3:
    """Every run that could take the old branch is gone: only the new code remains."""

    @workflow.run
    async def run(self, amount: int) -> str:
        await workflow.sleep(timedelta(minutes=5))
        workflow.deprecate_patch("new-charge")
        charged = await workflow.execute_activity(
            new_charge, amount, start_to_close_timeout=timedelta(seconds=10)
        )
        workflow.deprecate_patch("triple")
        return f"{charged} x{amount * 3}"


@workflow.defn(name="Billing")
class BillingV4:
    """The deprecate_patch calls deleted."""

    @workflow.run
    async def run(self, amount: int) -> str:
        await workflow.sleep(timedelta(minutes=5))
        charged = await workflow.execute_activity(
            new_charge, amount, start_to_close_timeout=timedelta(seconds=10)
        )
        return f"{charged} x{amount * 3}"


async def run_and_export(cls: type, *args: object) -> tuple[object, history_pb2.History]:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[cls], activities=[old_charge, new_charge]),
    ):
        handle = await env.client.start_workflow(
            definition_of(cls).name, *args, id=f"wf-{uuid.uuid4().hex[:6]}", task_queue="q"
        )
        result = await handle.result(timeout=30)
        return result, history_pb2.History(events=await handle.history())


def markers(history: history_pb2.History) -> list[tuple[int, str, str]]:
    return [
        (e.marker_recorded.seq, e.marker_recorded.kind, e.marker_recorded.id)
        for e in history.events
        if e.HasField("marker_recorded")
    ]


def seqs(history: history_pb2.History) -> list[int]:
    return [e.activity_scheduled.seq for e in history.events if e.HasField("activity_scheduled")]


async def test_side_effect_runs_once_and_replays_the_recorded_value() -> None:
    CALLS.clear()
    result, history = await run_and_export(Tokens)
    # Three workflow tasks, each replaying from the start; each function ran once.
    assert len(CALLS) == 2
    assert result == [CALLS[0], CALLS[1], "7"]
    assert markers(history) == [
        (1, "side_effect", ""),
        (3, "side_effect", ""),
        (4, "side_effect", ""),
    ]

    CALLS.clear()
    replayed = Replayer([Tokens]).replay(history)
    assert replayed.ok, replayed.describe()
    assert CALLS == [], "replay must not call the side-effect function"


async def test_reordered_side_effect_is_nondeterminism() -> None:
    _, history = await run_and_export(Tokens)
    result = Replayer([TokensReordered], raise_on_failure=False).replay(history)
    error = result.nondeterminism
    assert error is not None, result.describe()
    assert error.seq == 1
    assert error.expected == "SideEffect(seq=1)"
    assert error.actual == "StartTimer(seq=1, duration=3600s)"
    assert isinstance(error, NondeterminismError)
    with pytest.raises(ReplayFailedError, match=r"nondeterminism at seq 1: expected SideEffect"):
        Replayer([TokensReordered]).replay(history)  # raises by default


async def test_patched_is_true_on_a_new_run_with_one_marker_per_change_id() -> None:
    BRANCHES.clear()
    result, history = await run_and_export(BillingV2, 5)
    assert result == "new:5 x15"
    assert markers(history) == [(0, "patch", "new-charge"), (0, "patch", "triple")]
    # Patch markers take no seq: the activity has seq 2, right after the timer.
    assert seqs(history) == [2]
    assert set(BRANCHES) == {"new"}
    assert Replayer([BillingV2]).replay(history).ok


async def test_an_old_history_takes_the_old_branch_and_emits_nothing() -> None:
    result, old_history = await run_and_export(BillingV1, 5)
    assert result == "old:5 x10"
    assert markers(old_history) == []
    BRANCHES.clear()
    replayed = Replayer([BillingV2]).replay(old_history)
    assert replayed.ok, replayed.describe()
    assert BRANCHES == ["old"]


async def test_deprecate_patch_replays_histories_with_and_without_the_marker() -> None:
    _, patched_history = await run_and_export(BillingV2, 5)
    _, deprecated_history = await run_and_export(BillingV3, 5)
    assert markers(deprecated_history) == markers(patched_history)
    for history in (patched_history, deprecated_history):
        for code in (BillingV2, BillingV3, BillingV4):
            result = Replayer([code]).replay(history)
            assert result.ok, f"{code.__name__}: {result.describe()}"
    # A history without the markers whose commands the new code still produces.
    _, plain_history = await run_and_export(BillingV4, 5)
    assert markers(plain_history) == []
    assert Replayer([BillingV3]).replay(plain_history).ok


async def test_the_old_code_cannot_replay_a_patched_history() -> None:
    _, history = await run_and_export(BillingV2, 5)
    result = Replayer([BillingV1], raise_on_failure=False).replay(history)
    error = result.nondeterminism
    assert error is not None, result.describe()
    assert error.seq == 2
    assert error.expected == 'ScheduleActivity(seq=2, type="new_charge")'
    assert error.actual == 'ScheduleActivity(seq=2, type="old_charge")'


@workflow.defn(name="Billing")
class BillingWithSideEffect:
    """Changed: a side effect added before the timer."""

    @workflow.run
    async def run(self, amount: int) -> str:
        token = workflow.side_effect(make_token)
        await workflow.sleep(timedelta(minutes=5))
        return token


async def test_a_side_effect_the_history_lacks_is_nondeterminism_and_never_runs() -> None:
    _, history = await run_and_export(BillingV1, 5)
    CALLS.clear()
    result = Replayer([BillingWithSideEffect], raise_on_failure=False).replay(history)
    error = result.nondeterminism
    assert error is not None, result.describe()
    assert (error.seq, error.expected, error.actual) == (
        1,
        "StartTimer(seq=1, duration=300s)",
        "SideEffect(seq=1)",
    )
    assert CALLS == []


async def fetch_one() -> int:
    return 1


@workflow.defn(name="RaisingSideEffect")
class RaisingSideEffect:
    @workflow.run
    async def run(self) -> str:
        try:
            return str(workflow.side_effect(lambda: 1 // 0))
        except Exception:  # a workflow cannot swallow it
            return "swallowed"


@workflow.defn(name="AsyncSideEffect")
class AsyncSideEffect:
    @workflow.run
    async def run(self) -> int:
        return workflow.side_effect(fetch_one)  # type: ignore[arg-type,return-value]


@workflow.defn(name="EmptyPatch")
class EmptyPatch:
    @workflow.run
    async def run(self) -> bool:
        return workflow.patched("")


def _started_history(workflow_type: str) -> bytes:
    history = history_pb2.History()
    event = history.events.add(event_id=1)
    event.workflow_started.workflow_type = workflow_type
    event.workflow_started.run_id = "run-1"
    return history.SerializeToString()


def _replay_new(cls: type) -> list[str]:
    definition = definition_of(cls)
    commands = replay(definition, _started_history(definition.name), 0, task_queue="q")
    return [c.WhichOneof("kind") or "" for c in commands]


def test_a_raising_side_effect_fails_the_task_and_records_nothing() -> None:
    with pytest.raises(WorkflowTaskError, match="ZeroDivisionError"):
        _replay_new(RaisingSideEffect)


def test_a_side_effect_must_be_synchronous() -> None:
    with pytest.raises(WorkflowTaskError, match="synchronous"):
        _replay_new(AsyncSideEffect)


def test_patched_rejects_an_empty_change_id() -> None:
    assert _replay_new(EmptyPatch) == ["fail_workflow"]


@pytest.mark.parametrize("suffix", [".json", ".pb"])
def test_the_markers_golden_history_replays(suffix: str) -> None:
    path = Path(__file__).resolve().parents[1] / "fixtures" / "histories" / f"markers{suffix}"
    result = Replayer([GoldenMarkers]).replay(path)
    assert result.ok, result.describe()
