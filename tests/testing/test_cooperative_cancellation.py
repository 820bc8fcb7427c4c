"""Cooperative cancellation on a real server and an in-process worker: the request's
reason and cleanup deadline reach workflow.cancellation(); cleanup inside
workflow.shield() runs its activity to completion; a request arriving inside a shield is
delivered when it exits; the cleanup deadline terminates a run whose cleanup hangs (time
skipping); each cancellation policy of activities and children; and a history recorded
with a shield replays."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from durable_rpc import activity, workflow
from durable_rpc.client import (
    WorkflowCancelledError,
    WorkflowHandle,
    WorkflowTerminatedError,
)
from durable_rpc.errors import InvalidCleanupTimeoutError
from durable_rpc.testing import Replayer, ReplayFailedError, WorkflowEnvironment
from durable_rpc.v1 import history_pb2
from durable_rpc.worker import Worker
from durable_rpc.workflow import CancellationPolicy, ParentClosePolicy
from tests.cli_process import run_cli_async
from tests.e2e.conftest import eventually

pytestmark = pytest.mark.timeout(90)

TIMEOUT = timedelta(seconds=60)
BEAT = timedelta(seconds=2)

#: What the activities did, in order ("<tag>:started", ":finished", ":cancelled").
LOG: list[str] = []
#: Opened by the test to let the `hold` activity of that tag finish.
GATES: dict[str, asyncio.Event] = {}


def gate(tag: str) -> asyncio.Event:
    return GATES.setdefault(tag, asyncio.Event())


@activity.defn
async def hold(tag: str) -> str:
    """Heartbeats until its gate opens (returns) or its attempt is cancelled."""
    LOG.append(f"{tag}:started")
    try:
        while not gate(tag).is_set():
            activity.heartbeat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate(tag).wait(), 0.05)
    except asyncio.CancelledError:
        LOG.append(f"{tag}:cancelled")
        raise
    LOG.append(f"{tag}:finished")
    return tag


@activity.defn
async def mark(note: str) -> str:
    LOG.append(note)
    return note


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@workflow.defn(name="ReadsTheRequest")
class ReadsTheRequest:
    @workflow.run
    async def run(self) -> dict[str, object]:
        before = workflow.cancellation()
        try:
            await workflow.sleep(timedelta(days=1))
        except asyncio.CancelledError:
            request = workflow.cancellation()
            assert request is not None
            return {
                "before": before is None,
                "reason": request.reason,
                "requested_at": _iso(request.requested_at),
                "cleanup_deadline": _iso(request.cleanup_deadline),
            }
        return {}


@workflow.defn(name="CleansUp")
class CleansUp:
    @workflow.run
    async def run(self, tag: str) -> str:
        try:
            await workflow.execute_activity(
                hold, f"{tag}-work", start_to_close_timeout=TIMEOUT, heartbeat_timeout=BEAT
            )
        except asyncio.CancelledError:
            with workflow.shield():
                await workflow.execute_activity(
                    hold, f"{tag}-cleanup", start_to_close_timeout=TIMEOUT, heartbeat_timeout=BEAT
                )
            raise
        return "not cancelled"


@workflow.defn(name="ShieldedStep")
class ShieldedStep:
    @workflow.run
    async def run(self, tag: str) -> str:
        async with workflow.shield():
            await workflow.execute_activity(
                hold, tag, start_to_close_timeout=TIMEOUT, heartbeat_timeout=BEAT
            )
            seen = workflow.cancellation() is not None
        try:
            await workflow.sleep(timedelta(days=1))
        except asyncio.CancelledError:
            return f"cancelled after the shield (request seen inside: {seen})"
        return "not cancelled"


@workflow.defn(name="ShieldedStep")
class UnshieldedStep:
    """ShieldedStep without its shield: the recorded history no longer replays."""

    @workflow.run
    async def run(self, tag: str) -> str:
        await workflow.execute_activity(
            hold, tag, start_to_close_timeout=TIMEOUT, heartbeat_timeout=BEAT
        )
        seen = workflow.cancellation() is not None
        try:
            await workflow.sleep(timedelta(days=1))
        except asyncio.CancelledError:
            return f"cancelled after the shield (request seen inside: {seen})"
        return "not cancelled"


@workflow.defn(name="HangingCleanup")
class HangingCleanup:
    @workflow.run
    async def run(self) -> str:
        try:
            await workflow.sleep(timedelta(days=1))
        except asyncio.CancelledError:
            with workflow.shield():
                await workflow.sleep(timedelta(days=7))  # a cleanup that never ends in time
            raise
        return "not cancelled"


@workflow.defn(name="ActivityPolicy")
class ActivityPolicy:
    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self, policy: str, tag: str) -> str:
        try:
            return await workflow.execute_activity(
                hold,
                tag,
                start_to_close_timeout=TIMEOUT,
                heartbeat_timeout=BEAT,
                cancellation=CancellationPolicy[policy],
            )
        except asyncio.CancelledError:
            # Where this lands in history shows whether the await waited.
            with workflow.shield():
                await workflow.execute_activity(
                    mark, f"{tag}:caught", start_to_close_timeout=TIMEOUT
                )
                await workflow.wait_condition(lambda: self.released)
            return "cancelled"


@workflow.defn(name="Kid")
class Kid:
    def __init__(self) -> None:
        self.done = False

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.done)
        return "kid done"


@workflow.defn(name="ChildPolicy")
class ChildPolicy:
    @workflow.run
    async def run(self, policy: str, kid_id: str) -> str:
        kwargs = {} if policy == "default" else {"cancellation": CancellationPolicy[policy]}
        return await workflow.execute_child_workflow(
            Kid.run, id=kid_id, parent_close_policy=ParentClosePolicy.ABANDON, **kwargs
        )


WORKFLOWS = [
    ReadsTheRequest,
    CleansUp,
    ShieldedStep,
    HangingCleanup,
    ActivityPolicy,
    Kid,
    ChildPolicy,
]


@pytest.fixture
async def env() -> AsyncIterator[WorkflowEnvironment]:
    LOG.clear()
    GATES.clear()
    async with (
        await WorkflowEnvironment.start_local() as environment,
        Worker(environment.client, task_queue="q", workflows=WORKFLOWS, activities=[hold, mark]),
    ):
        yield environment


def kinds(events: list[history_pb2.HistoryEvent]) -> list[str | None]:
    return [e.WhichOneof("attributes") for e in events]


async def logged(entry: str) -> None:
    await eventually(lambda: entry in LOG, what=entry)


async def cancel_seen(handle: WorkflowHandle) -> None:
    """Until a workflow task completed after the run's CancelRequested (its code ran)."""

    async def seen() -> bool:
        names = kinds(await handle.history())
        return (
            "cancel_requested" in names
            and "workflow_task_completed" in names[names.index("cancel_requested") :]
        )

    await eventually(seen, what="the cancellation processed")


async def test_a_cancel_with_a_reason_and_cleanup_timeout_reaches_workflow_cancellation(
    env: WorkflowEnvironment,
) -> None:
    handle = await env.client.start_workflow(ReadsTheRequest.run, id="reads", task_queue="q")
    await eventually(
        lambda: _has(handle, "timer_started"), what="the workflow waiting on its timer"
    )
    await handle.cancel("user asked", cleanup_timeout=timedelta(seconds=90))
    result = await handle.result(timeout=30)
    (event,) = [e for e in await handle.history() if e.HasField("cancel_requested")]
    requested_at = event.event_time.ToDatetime(tzinfo=UTC)
    assert result == {
        "before": True,
        "reason": "user asked",
        "requested_at": requested_at.isoformat(),
        "cleanup_deadline": (requested_at + timedelta(seconds=90)).isoformat(),
    }


async def _has(handle: WorkflowHandle, kind: str) -> bool:
    return kind in kinds(await handle.history())


async def test_cleanup_in_a_shield_runs_its_activity_to_completion_after_cancel(
    env: WorkflowEnvironment,
) -> None:
    handle = await env.client.start_workflow(CleansUp.run, "c", id="cleans", task_queue="q")
    await logged("c-work:started")
    await handle.cancel("user asked")
    # The awaited activity (TRY_CANCEL, the default) was asked to stop; the cleanup runs.
    await logged("c-work:cancelled")
    await logged("c-cleanup:started")
    # A second request while cleaning up changes nothing: the first one stands.
    await handle.cancel("again")
    gate("c-cleanup").set()
    with pytest.raises(WorkflowCancelledError):
        await handle.result(timeout=30)
    assert "c-cleanup:finished" in LOG and "c-cleanup:cancelled" not in LOG
    history = await handle.history()
    assert [e.cancel_requested.reason for e in history if e.HasField("cancel_requested")] == [
        "user asked"
    ]
    completed = [e.activity_completed.seq for e in history if e.HasField("activity_completed")]
    assert completed == [2]  # the cleanup activity's result was recorded
    assert kinds(history)[-1] == "workflow_cancelled"


async def test_a_cancel_arriving_inside_a_shield_is_delivered_when_it_exits(
    env: WorkflowEnvironment,
) -> None:
    handle = await env.client.start_workflow(
        ShieldedStep.run, "step", id="shielded", task_queue="q"
    )
    await logged("step:started")
    await handle.cancel("during the step")
    await cancel_seen(handle)  # the code ran with the request and stayed in its shield
    assert "step:cancelled" not in LOG
    gate("step").set()
    assert (
        await handle.result(timeout=30) == "cancelled after the shield (request seen inside: True)"
    )
    history = await handle.history()
    assert "activity_cancel_requested" not in kinds(history)
    assert [e.activity_completed.seq for e in history if e.HasField("activity_completed")] == [1]
    # Replay of the recorded history (the shield deferred the request) is deterministic;
    # the same code without its shield diverges from it.
    Replayer([ShieldedStep]).replay(history_pb2.History(events=history))
    with pytest.raises(ReplayFailedError):
        Replayer([UnshieldedStep]).replay(history_pb2.History(events=history))


async def test_the_cleanup_deadline_terminates_a_run_whose_cleanup_hangs() -> None:
    async with await WorkflowEnvironment.start_time_skipping() as env:
        env.auto_time_skipping = False
        async with Worker(env.client, task_queue="q", workflows=[HangingCleanup]):
            handle = await env.client.start_workflow(HangingCleanup.run, id="hangs", task_queue="q")
            await eventually(lambda: _has(handle, "timer_started"), what="the first timer")
            start = await env.now()
            await handle.cancel("stop", cleanup_timeout=timedelta(hours=1))
            await cancel_seen(handle)
            env.auto_time_skipping = True  # the clock jumps to the cleanup deadline
            with pytest.raises(WorkflowTerminatedError):
                await handle.result(timeout=30)
            assert await env.now() - start >= timedelta(hours=1)
            description = await handle.describe()
            assert description.info.status == "terminated"
            history = await handle.history()
            assert history[-1].workflow_terminated.reason == "CLEANUP_DEADLINE_EXCEEDED"
            started = [e for e in history if e.HasField("timer_started")]
            assert len(started) == 2  # the cleanup's timer was waiting, unfired
            assert "timer_fired" not in kinds(history)


async def test_a_cleanup_timeout_that_is_not_positive_is_refused(
    env: WorkflowEnvironment,
) -> None:
    handle = await env.client.start_workflow(ReadsTheRequest.run, id="refused", task_queue="q")
    with pytest.raises(InvalidCleanupTimeoutError) as raised:
        await handle.cancel("x", cleanup_timeout=timedelta(seconds=-1))
    assert raised.value.reason == "INVALID_CLEANUP_TIMEOUT"
    assert not await _has(handle, "cancel_requested")


def _positions(history: list[history_pb2.HistoryEvent]) -> dict[str, int]:
    """Event index of: the cancel request of activity 1, its cancellation or completion,
    and the scheduling of the `mark` activity the catching code runs."""
    found: dict[str, int] = {}
    for i, e in enumerate(history):
        kind = e.WhichOneof("attributes")
        if kind == "activity_scheduled" and e.activity_scheduled.activity_type == "mark":
            found["caught"] = i
        elif (
            kind in ("activity_cancel_requested", "activity_cancelled", "activity_completed")
            and getattr(e, kind).seq == 1
        ):
            found[kind] = i
    return found


@pytest.mark.parametrize("policy", ["TRY_CANCEL", "WAIT_CANCELLATION_COMPLETED", "ABANDON"])
async def test_each_activity_cancellation_policy(env: WorkflowEnvironment, policy: str) -> None:
    tag = policy.lower()
    handle = await env.client.start_workflow(
        ActivityPolicy.run, policy, tag, id=f"act-{tag}", task_queue="q"
    )
    await logged(f"{tag}:started")
    await handle.cancel("policy test")
    if policy == "ABANDON":
        # Nothing asks the activity to stop: it runs on and completes while the run is
        # being cancelled (its result is dropped by the code that stopped waiting).
        await logged(f"{tag}:caught")
        gate(tag).set()
        await logged(f"{tag}:finished")
        await eventually(lambda: _has(handle, "activity_completed"), what="the result")
    else:
        await logged(f"{tag}:cancelled")
        await eventually(lambda: _has(handle, "activity_cancelled"), what="the cancellation")
        await logged(f"{tag}:caught")
    await handle.signal(ActivityPolicy.release)
    assert await handle.result(timeout=30) == "cancelled"
    at = _positions(await handle.history())
    if policy == "TRY_CANCEL":
        # Asked, and the code went on at once: in the same task, before the outcome.
        assert at["activity_cancel_requested"] < at["caught"] < at["activity_cancelled"]
    elif policy == "WAIT_CANCELLATION_COMPLETED":
        assert at["activity_cancel_requested"] < at["activity_cancelled"] < at["caught"]
    else:
        assert "activity_cancel_requested" not in at and f"{tag}:cancelled" not in LOG
        assert at["caught"] < at["activity_completed"]


@pytest.mark.parametrize(
    ("policy", "kid_status"),
    [("default", "running"), ("ABANDON", "running"), ("TRY_CANCEL", "cancelled")],
)
async def test_each_child_cancellation_policy(
    env: WorkflowEnvironment, policy: str, kid_status: str
) -> None:
    kid_id = f"kid-{policy.lower()}"
    parent = await env.client.start_workflow(
        ChildPolicy.run, policy, kid_id, id=f"parent-{policy.lower()}", task_queue="q"
    )
    await eventually(lambda: _has(parent, "child_workflow_started"), what="the child")
    await parent.cancel("parent cancelled")
    with pytest.raises(WorkflowCancelledError):
        await parent.result(timeout=30)
    kid = env.client.get_handle(kid_id)
    parent_kinds = kinds(await parent.history())
    if kid_status == "running":
        # Abandoned (children's default): the child was not asked and keeps running.
        assert "child_cancel_requested" not in parent_kinds
        assert (await kid.describe()).info.status == "running"
        assert not await _has(kid, "cancel_requested")
        await kid.signal(Kid.finish)
        assert await kid.result(timeout=30) == "kid done"
    else:
        assert "child_cancel_requested" in parent_kinds
        with pytest.raises(WorkflowCancelledError):
            await kid.result(timeout=30)
        assert await _has(kid, "cancel_requested")


async def test_the_cli_cancels_with_a_reason_and_cleanup_timeout(
    env: WorkflowEnvironment,
) -> None:
    handle = await env.client.start_workflow(ReadsTheRequest.run, id="by-cli", task_queue="q")
    await eventually(lambda: _has(handle, "timer_started"), what="the timer")
    bad = await run_cli_async(
        "workflow", "cancel", "by-cli", "--cleanup-timeout", "soon", address=env.address
    )
    assert bad.returncode == 2 and "not a duration" in bad.stderr
    done = await run_cli_async(
        "workflow",
        "cancel",
        "by-cli",
        "--reason",
        "from the shell",
        "--cleanup-timeout",
        "90s",
        address=env.address,
    )
    assert done.returncode == 0, done.stderr
    result = await handle.result(timeout=30)
    assert result["reason"] == "from the shell"
    requested = datetime.fromisoformat(str(result["requested_at"]))
    deadline = datetime.fromisoformat(str(result["cleanup_deadline"]))
    assert deadline - requested == timedelta(seconds=90)
