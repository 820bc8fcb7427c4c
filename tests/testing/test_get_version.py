"""workflow.get_version on the time-skipping environment and through the Replayer: a new
run records max_supported once per change id, a history recorded before the call replays
as DEFAULT_VERSION (-1), raising max_supported keeps old runs replaying their recorded
version, and a recorded version outside the supported range fails the workflow task with
a nondeterminism error naming the change id and the range."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from durable_rpc import NondeterminismError, Worker, activity, converter, workflow
from durable_rpc.testing import Replayer, WorkflowEnvironment
from durable_rpc.v1 import history_pb2
from durable_rpc.worker._workflow_task import replay
from durable_rpc.workflow._definition import definition_of
from tests.testing.test_markers import _started_history

pytestmark = pytest.mark.timeout(60)

BRANCHES: list[int] = []


@activity.defn
async def ship_v1(order: str) -> str:
    return f"v1:{order}"


@activity.defn
async def ship_v2(order: str) -> str:
    return f"v2:{order}"


@activity.defn
async def ship_v3(order: str) -> str:
    return f"v3:{order}"


SHIPPERS = {workflow.DEFAULT_VERSION: ship_v1, 1: ship_v2, 2: ship_v3}


async def _ship(order: str, version: int) -> str:
    BRANCHES.append(version)
    return await workflow.execute_activity(
        SHIPPERS[version], order, start_to_close_timeout=timedelta(seconds=10)
    )


@workflow.defn(name="Shipping")
class ShippingV0:
    """Before any change: no get_version call."""

    @workflow.run
    async def run(self, order: str) -> str:
        await workflow.sleep(timedelta(minutes=5))
        return await _ship(order, workflow.DEFAULT_VERSION)


@workflow.defn(name="Shipping")
class ShippingV1:
    @workflow.run
    async def run(self, order: str) -> str:
        await workflow.sleep(timedelta(minutes=5))
        version = workflow.get_version("ship", workflow.DEFAULT_VERSION, 1)
        assert workflow.get_version("ship", workflow.DEFAULT_VERSION, 1) == version
        return await _ship(order, version)


@workflow.defn(name="Shipping")
class ShippingV2:
    """max_supported raised: runs recorded at version 1 (or unmarked) still replay."""

    @workflow.run
    async def run(self, order: str) -> str:
        await workflow.sleep(timedelta(minutes=5))
        return await _ship(order, workflow.get_version("ship", workflow.DEFAULT_VERSION, 2))


@workflow.defn(name="Shipping")
class ShippingOnlyV2:
    """min_supported raised to 2: runs recorded at version 1 or unmarked no longer fit."""

    @workflow.run
    async def run(self, order: str) -> str:
        await workflow.sleep(timedelta(minutes=5))
        return await _ship(order, workflow.get_version("ship", 2, 2))


@workflow.defn(name="Shipping")
class ShippingCallRemoved:
    """Every open run is at version 2: the call and the old branches are deleted."""

    @workflow.run
    async def run(self, order: str) -> str:
        await workflow.sleep(timedelta(minutes=5))
        return await _ship(order, 2)


async def run_and_export(cls: type, order: str) -> tuple[object, history_pb2.History]:
    async with (
        await WorkflowEnvironment.start_time_skipping() as env,
        Worker(env.client, task_queue="q", workflows=[cls], activities=[ship_v1, ship_v2, ship_v3]),
    ):
        handle = await env.client.start_workflow(
            "Shipping", order, id=f"wf-{uuid.uuid4().hex[:6]}", task_queue="q"
        )
        result = await handle.result(timeout=30)
        return result, history_pb2.History(events=await handle.history())


def version_markers(history: history_pb2.History) -> list[tuple[int, str, str]]:
    return [
        (e.marker_recorded.seq, e.marker_recorded.kind, e.marker_recorded.id)
        for e in history.events
        if e.HasField("marker_recorded")
    ]


async def test_a_new_run_records_max_supported_once() -> None:
    BRANCHES.clear()
    result, history = await run_and_export(ShippingV1, "o1")
    assert result == "v2:o1"
    # One marker for two calls; it takes no seq (the activity is seq 2, after the timer).
    assert version_markers(history) == [(0, "version", "ship")]
    assert [
        e.activity_scheduled.seq for e in history.events if e.HasField("activity_scheduled")
    ] == [2]
    assert set(BRANCHES) == {1}
    assert Replayer([ShippingV1]).replay(history).ok


async def test_a_history_recorded_before_the_call_replays_as_the_default_version() -> None:
    result, old_history = await run_and_export(ShippingV0, "o2")
    assert result == "v1:o2"
    for code in (ShippingV1, ShippingV2):
        BRANCHES.clear()
        replayed = Replayer([code]).replay(old_history)
        assert replayed.ok, replayed.describe()
        assert BRANCHES == [workflow.DEFAULT_VERSION]


async def test_raising_max_supported_keeps_old_runs_on_their_recorded_version() -> None:
    _, v1_history = await run_and_export(ShippingV1, "o3")
    BRANCHES.clear()
    replayed = Replayer([ShippingV2]).replay(v1_history)
    assert replayed.ok, replayed.describe()
    assert BRANCHES == [1]
    # A new run of the new code takes the new maximum.
    result, v2_history = await run_and_export(ShippingV2, "o3")
    assert result == "v3:o3"
    # The old code cannot replay it: version 2 is above its max_supported 1.
    error = Replayer([ShippingV1], raise_on_failure=False).replay(v2_history).error
    assert isinstance(error, NondeterminismError), error
    assert str(error) == (
        'nondeterminism at seq 0: expected Version(id="ship", version=2), '
        'got GetVersion(id="ship", supported=[-1, 1])'
    )


async def test_a_recorded_version_below_min_supported_fails_the_task() -> None:
    _, v1_history = await run_and_export(ShippingV1, "o4")
    _, old_history = await run_and_export(ShippingV0, "o4")
    for history, recorded in ((v1_history, 1), (old_history, -1)):
        BRANCHES.clear()
        error = Replayer([ShippingOnlyV2], raise_on_failure=False).replay(history).error
        assert isinstance(error, NondeterminismError), error
        assert error.expected == f'Version(id="ship", version={recorded})'
        assert error.actual == 'GetVersion(id="ship", supported=[2, 2])'
        assert BRANCHES == [], "the code must not go on past an unsupported version"


async def test_deleting_the_call_replays_histories_that_recorded_it() -> None:
    _, v2_history = await run_and_export(ShippingV2, "o5")
    assert version_markers(v2_history) == [(0, "version", "ship")]
    replayed = Replayer([ShippingCallRemoved]).replay(v2_history)
    assert replayed.ok, replayed.describe()


@workflow.defn(name="BadVersionRange")
class BadVersionRange:
    @workflow.run
    async def run(self, low: int, high: int, change_id: str) -> int:
        return workflow.get_version(change_id, low, high)


@pytest.mark.parametrize(
    ("low", "high", "change_id"),
    [(2, 1, "x"), (-2, 1, "x"), (0, 1, "")],
)
def test_get_version_rejects_bad_arguments(low: int, high: int, change_id: str) -> None:
    definition = definition_of(BadVersionRange)
    history = history_pb2.History.FromString(_started_history(definition.name))
    history.events[0].workflow_started.input.data = converter.encode([low, high, change_id])
    commands = replay(definition, history.SerializeToString(), 0, task_queue="q")
    assert [c.WhichOneof("kind") for c in commands] == ["fail_workflow"]
    assert commands[0].fail_workflow.failure.type == "ValueError"
