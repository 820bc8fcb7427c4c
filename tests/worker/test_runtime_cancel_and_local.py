"""Runtime-level activity cancellation (RequestCancelActivity, ActivityCancelled) and
local activities (follow-up resolution live, recorded markers on replay)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from durable_rpc import activity, converter, workflow
from durable_rpc.v1 import workflow_task_pb2
from durable_rpc.worker._local_activity import run_local_activity
from durable_rpc.workflow._runtime import LOCAL_ACTIVITY_MARKER, LocalActivityOutcome
from tests.worker.activations import activation, completed, fire, instance, kinds, result_of, start

TIMEOUT = timedelta(seconds=10)
calls: list[str] = []


def cancelled(seq: int) -> workflow_task_pb2.ActivationJob:
    job = workflow_task_pb2.ActivationJob()
    job.resolve_activity.seq = seq
    job.resolve_activity.cancelled = True
    return job


async def cancel_after_timer(**policy: workflow.CancellationPolicy) -> str:
    """Starts an activity, cancels its await after a timer, returns what the await did."""
    task = asyncio.ensure_future(
        workflow.execute_activity("slow", start_to_close_timeout=TIMEOUT, **policy)
    )
    await workflow.sleep(1)
    task.cancel()
    try:
        return "result:" + await task
    except asyncio.CancelledError:
        return "cancelled"


@workflow.defn
class CancelAfterTimer:
    """Waits for the cancelled activity's outcome."""

    @workflow.run
    async def run(self) -> str:
        return await cancel_after_timer(
            cancellation=workflow.CancellationPolicy.WAIT_CANCELLATION_COMPLETED
        )


@workflow.defn
class TryCancelAfterTimer:
    @workflow.run
    async def run(self) -> str:
        return await cancel_after_timer(cancellation=workflow.CancellationPolicy.TRY_CANCEL)


@workflow.defn
class DefaultCancelAfterTimer:
    @workflow.run
    async def run(self) -> str:
        return await cancel_after_timer()


@workflow.defn
class AbandonAfterTimer:
    @workflow.run
    async def run(self) -> str:
        return await cancel_after_timer(cancellation=workflow.CancellationPolicy.ABANDON)


@pytest.mark.parametrize("wf_class", [TryCancelAfterTimer, DefaultCancelAfterTimer])
def test_try_cancel_asks_and_raises_at_once_dropping_the_outcome(wf_class: type) -> None:
    # TRY_CANCEL is the default: the request is sent and the awaiting code goes on in the
    # same activation; the outcome that follows (a late result here) is dropped.
    wf = instance(wf_class)
    wf.activate(activation(start(wf_class)))
    out = wf.activate(activation(fire(1)))
    assert kinds(out.commands) == ["request_cancel_activity", "complete_workflow"]
    assert result_of(out.commands[1]) == "cancelled"


def test_abandon_sends_no_request_and_raises_at_once() -> None:
    wf = instance(AbandonAfterTimer)
    wf.activate(activation(start(AbandonAfterTimer)))
    out = wf.activate(activation(fire(1)))
    assert kinds(out.commands) == ["complete_workflow"]
    assert result_of(out.commands[0]) == "cancelled"


def test_activity_cancelled_raises_cancelled_error_in_the_awaiting_code() -> None:
    wf = instance(CancelAfterTimer)
    assert kinds(wf.activate(activation(start(CancelAfterTimer))).commands) == [
        "start_timer",
        "schedule_activity",
    ]
    out = wf.activate(activation(fire(1)))
    assert kinds(out.commands) == ["request_cancel_activity"]
    assert out.commands[0].seq == 2
    done = wf.activate(activation(cancelled(2)))
    assert result_of(done.commands[0]) == "cancelled"


def test_a_result_that_arrives_after_the_cancel_request_is_returned() -> None:
    wf = instance(CancelAfterTimer)
    wf.activate(activation(start(CancelAfterTimer)))
    wf.activate(activation(fire(1)))
    done = wf.activate(activation(completed(2, "done anyway")))
    assert result_of(done.commands[0]) == "result:done anyway"


@activity.defn
def local_echo(tag: str) -> str:
    calls.append(tag)
    return tag.upper()


@workflow.defn
class LocalAndRemote:
    @workflow.run
    async def run(self) -> list[str]:
        return list(
            await asyncio.gather(
                workflow.execute_local_activity(local_echo, "a"),
                workflow.execute_activity("remote", start_to_close_timeout=TIMEOUT),
            )
        )


def test_local_activity_resolves_in_a_follow_up_and_replays_in_the_same_order() -> None:
    calls.clear()
    live = instance(LocalAndRemote)
    first = live.activate(activation(start(LocalAndRemote)))
    assert kinds(first.commands) == ["schedule_activity"]
    (request,) = live.pending_local_activities()
    outcome = run_local_activity(request, None)
    assert calls == ["a"]
    follow_up = live.resolve_local_activities([outcome])
    assert kinds(follow_up) == ["record_marker"]
    assert follow_up[0].record_marker.kind == LOCAL_ACTIVITY_MARKER
    recorded = [*first.commands, *follow_up]
    for command in recorded:
        # The attempt log (details) is live only: replay re-emits the marker without it.
        if command.HasField("record_marker"):
            command.record_marker.ClearField("details")

    # Replaying that task: the marker answers, in the recorded order, without a call.
    replayed = instance(LocalAndRemote)
    again = activation(start(LocalAndRemote))
    again.is_replaying = True
    again.markers.add(
        seq=1, kind=LOCAL_ACTIVITY_MARKER, id="", payload=follow_up[0].record_marker.payload
    )
    out = replayed.activate(again)
    assert list(out.commands) == recorded
    assert replayed.pending_local_activities() == []
    assert calls == ["a"]
    done = replayed.activate(activation(completed(2, "B")))
    assert result_of(done.commands[0]) == ["A", "B"]


def test_local_activity_failure_outcome_raises_activity_error() -> None:
    live = instance(LocalAndRemote)
    live.activate(activation(start(LocalAndRemote)))
    data = converter.encode(["RuntimeError", "boom", 3])
    out = live.resolve_local_activities([LocalActivityOutcome(1, "failed", data)])
    assert kinds(out) == ["record_marker", "fail_workflow"]
    assert "RuntimeError: boom" in out[1].fail_workflow.failure.message


def test_local_activity_timeout_counts_as_a_failed_attempt() -> None:
    @activity.defn
    async def sleepy() -> None:
        await asyncio.sleep(5)

    @workflow.defn
    class Sleepy:
        @workflow.run
        async def run(self) -> None:
            await workflow.execute_local_activity(
                sleepy,
                start_to_close_timeout=0.05,
                retry_policy=workflow.RetryPolicy(maximum_attempts=1),
            )

    wf = instance(Sleepy)
    wf.activate(activation(start(Sleepy)))
    (request,) = wf.pending_local_activities()
    outcome = run_local_activity(request, None)
    assert outcome.marker_id == "failed"
    assert converter.decode(outcome.data, list)[0] == "LocalActivityTimeoutError"


def test_select_rejects_nothing() -> None:
    with pytest.raises(ValueError, match="at least one"):
        asyncio.run(workflow.select())
