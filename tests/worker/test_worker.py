"""Worker and supervisor against an in-memory WorkerService."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import grpc
import pytest

from durable_rpc import activity, converter, payload, workflow
from durable_rpc._rpc_status import to_status
from durable_rpc.errors import LeaseLostError, StoreUnavailableError
from durable_rpc.v1 import history_pb2, payload_pb2, service_pb2
from durable_rpc.worker import (
    CancellationToken,
    SupervisorReport,
    Worker,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
    default_worker_id,
)
from durable_rpc.worker._client import call
from durable_rpc.worker._server_link import ServerLink
from tests.worker.fake_service import FakeClient, eventually
from tests.worker.recorder import BASE_MS, RUN_ID

FAST = WorkflowSupervisorConfig(2).with_backoff(0.01, 0.05)


@activity.defn
async def double(n: int) -> int:
    return n * 2


@activity.defn(name="whoami")
def whoami(prefix: str) -> str:
    info = activity.info()
    return f"{prefix}:{info.task_id}:{info.fencing_token}:{threading.current_thread().name}"


@activity.defn
async def refuse() -> None:
    raise activity.ApplicationError("card declined", type="CardDeclined", non_retryable=True)


@activity.defn
async def crash() -> None:
    raise KeyError("missing")


progress: list[str] = []


@activity.defn
async def slow(steps: int) -> str:
    for i in range(steps):
        activity.heartbeat(f"step-{i}")
        progress.append(f"step-{i}")
        await asyncio.sleep(0.1)
    return "finished"


@workflow.defn(name="Doubler")
class Doubler:
    @workflow.run
    async def run(self, n: int) -> int:
        return await workflow.execute_activity(
            double, n, start_to_close_timeout=timedelta(seconds=5)
        )


@workflow.defn(name="Doubler", version="2")
class DoublerV2:
    @workflow.run
    async def run(self, n: int) -> int:
        return n * 2


def workflow_task(task_id: int, n: int, version: str = "1") -> service_pb2.PollWorkflowTaskResponse:
    history = history_pb2.History()
    event = history.events.add(event_id=1)
    event.workflow_started.CopyFrom(
        history_pb2.WorkflowStarted(
            workflow_type="Doubler",
            workflow_version=version,
            workflow_id="wf",
            run_id=RUN_ID,
            input=payload_pb2.Payload(data=converter.encode_args([n])),
        )
    )
    task = service_pb2.PollWorkflowTaskResponse(
        task_id=task_id,
        fencing_token=3,
        workflow_id="wf",
        run_id=RUN_ID,
        workflow_type="Doubler",
        workflow_version=version,
        history=history,
        attempt=1,
    )
    task.workflow_time.FromMilliseconds(BASE_MS)
    return task


def activity_task(
    task_id: int, activity_type: str, *args: Any, heartbeat_ms: int = 0
) -> service_pb2.PollActivityTaskResponse:
    task = service_pb2.PollActivityTaskResponse(
        task_id=task_id,
        fencing_token=7,
        workflow_id="wf",
        run_id=RUN_ID,
        seq=1,
        activity_type=activity_type,
        input=payload_pb2.Payload(data=converter.encode_args(args)),
        attempt=1,
    )
    if heartbeat_ms:
        task.heartbeat_timeout.FromMilliseconds(heartbeat_ms)
    return task


def new_worker(client: FakeClient, **kwargs: Any) -> Worker:
    return Worker(
        client,
        task_queue="tq",
        workflows=kwargs.pop("workflows", [Doubler, DoublerV2]),
        activities=kwargs.pop("activities", [double, whoami, refuse, crash, slow]),
        worker_id="w-test",
        **kwargs,
    )


async def run_until(
    client: FakeClient, worker: Worker, done: Any, config: WorkflowSupervisorConfig = FAST
) -> SupervisorReport:
    token = CancellationToken()
    run = asyncio.ensure_future(WorkflowSupervisor(worker, config).run(token))
    try:
        await eventually(done)
    finally:
        token.cancel()
    return await asyncio.wait_for(run, 5)


# --- configuration ----------------------------------------------------------------------


def test_supervisor_config_validation() -> None:
    with pytest.raises(ValueError, match="max_concurrency"):
        WorkflowSupervisorConfig(0)
    base = WorkflowSupervisorConfig(8)
    with pytest.raises(ValueError, match="positive"):
        base.with_backoff(0, 1)
    with pytest.raises(ValueError, match="below min"):
        base.with_backoff(timedelta(seconds=2), timedelta(seconds=1))
    config = base.with_backoff(timedelta(milliseconds=25), timedelta(seconds=5))
    assert (config.max_concurrency, config.backoff_min, config.backoff_max) == (8, 0.025, 5.0)
    assert base.backoff_min == 0.025  # with_backoff returns a new config
    assert [config.backoff(n) for n in (1, 2, 3)] == [0.025, 0.05, 0.1]
    assert config.backoff(50) == 5.0


async def test_cancellation_token() -> None:
    token = CancellationToken()
    assert not token.is_cancelled
    waiter = asyncio.ensure_future(token.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    threading.Thread(target=token.cancel).start()  # safe from another thread
    await asyncio.wait_for(waiter, 1)
    assert token.is_cancelled
    await asyncio.wait_for(token.wait(), 1)  # already cancelled: returns at once


def test_worker_id_is_unique_and_stable_per_process() -> None:
    assert default_worker_id() == default_worker_id()
    assert default_worker_id().count(":") == 2
    assert Worker(FakeClient(), task_queue="q", activities=[double]).worker_id == (
        default_worker_id()
    )


def test_worker_needs_something_to_run() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Worker(FakeClient(), task_queue="q")


# --- lifecycle --------------------------------------------------------------------------


async def test_registers_definitions_and_deregisters_on_stop() -> None:
    client = FakeClient()
    worker = new_worker(client)
    report = await run_until(client, worker, lambda: client.service.calls["WorkerHeartbeat"])
    (register,) = client.service.calls["RegisterWorker"]
    assert register.worker_id == "w-test"
    assert [(d.name, d.version) for d in register.workflows] == [("Doubler", "1"), ("Doubler", "2")]
    assert all(len(d.fingerprint) == 64 for d in register.workflows)
    assert list(register.activities) == ["crash", "double", "refuse", "slow", "whoami"]
    assert len(client.service.calls["DeregisterWorker"]) == 1
    assert report.claims == 0


async def test_async_with_runs_a_background_supervisor() -> None:
    client = FakeClient()
    async with new_worker(client) as worker:
        await client.service.activity_tasks.put(activity_task(5, "double", 21))
        await eventually(lambda: client.service.calls["CompleteActivityTask"])
    assert worker.report is not None
    assert worker.report.completions == 1
    assert len(client.service.calls["DeregisterWorker"]) == 1


# --- workflow tasks ---------------------------------------------------------------------


async def test_workflow_task_is_replayed_and_completed_with_new_commands() -> None:
    client = FakeClient()
    await client.service.workflow_tasks.put(workflow_task(11, 4))
    await client.service.workflow_tasks.put(workflow_task(12, 5, version="2"))
    report = await run_until(
        client, new_worker(client), lambda: len(client.service.calls["CompleteWorkflowTask"]) == 2
    )
    first, second = client.service.calls["CompleteWorkflowTask"]
    assert (first.lease.task_id, first.lease.worker_id, first.lease.fencing_token) == (
        11,
        "w-test",
        3,
    )
    assert first.last_seen_event_id == 1
    assert [c.schedule_activity.activity_type for c in first.commands] == ["double"]
    assert converter.decode(second.commands[0].complete_workflow.result.data) == 10
    assert (report.claims, report.workflow_tasks, report.completions) == (2, 2, 2)


async def test_unknown_definition_fails_the_workflow_task() -> None:
    client = FakeClient()
    await client.service.workflow_tasks.put(workflow_task(13, 1, version="9"))
    report = await run_until(
        client, new_worker(client), lambda: client.service.calls["FailWorkflowTask"]
    )
    (fail,) = client.service.calls["FailWorkflowTask"]
    assert fail.failure.type == "DefinitionUnavailableError"
    assert report.failures == 1


async def test_workflow_blocking_past_the_deadline_fails_the_task() -> None:
    release = threading.Event()

    @workflow.defn(name="Doubler", version="3")
    class Blocking:
        @workflow.run
        async def run(self, n: int) -> None:
            release.wait(5)  # a blocking call in workflow code

    client = FakeClient()
    await client.service.workflow_tasks.put(workflow_task(14, 1, version="3"))
    worker = new_worker(
        client, workflows=[Blocking], workflow_task_deadline=timedelta(milliseconds=100)
    )
    try:
        await run_until(client, worker, lambda: client.service.calls["FailWorkflowTask"])
    finally:
        release.set()
    (fail,) = client.service.calls["FailWorkflowTask"]
    assert fail.failure.type == "TimeoutError"
    assert not client.service.calls["CompleteWorkflowTask"]


# --- activity tasks ---------------------------------------------------------------------


async def test_activities_complete_or_fail_with_typed_failures() -> None:
    client = FakeClient()
    for task in (
        activity_task(21, "double", 21),
        activity_task(22, "whoami", "me"),
        activity_task(23, "refuse"),
        activity_task(24, "crash"),
        activity_task(25, "nobody"),
    ):
        await client.service.activity_tasks.put(task)
    report = await run_until(
        client,
        new_worker(client),
        lambda: (
            len(client.service.calls["CompleteActivityTask"]) == 2
            and len(client.service.calls["FailActivityTask"]) == 3
        ),
    )
    done = {
        c.lease.task_id: payload.decode(c.result.data)
        for c in client.service.calls["CompleteActivityTask"]
    }
    assert done[21] == 42
    prefix, task_id, token, thread = str(done[22]).split(":")
    assert (prefix, task_id, token) == ("me", "22", "7")
    assert thread.startswith("durable-activity")  # sync activities run in the pool
    failures = {f.lease.task_id: f.failure for f in client.service.calls["FailActivityTask"]}
    assert (failures[23].type, failures[23].message, failures[23].non_retryable) == (
        "CardDeclined",
        "card declined",
        True,
    )
    assert failures[24].type == "KeyError"
    assert "raise KeyError" in failures[24].stack_trace
    assert failures[25].type == "ActivityNotRegistered"
    assert (report.activity_tasks, report.completions, report.failures) == (5, 2, 3)


async def test_heartbeats_carry_the_last_details_at_half_the_window() -> None:
    progress.clear()
    client = FakeClient()
    await client.service.activity_tasks.put(activity_task(31, "slow", 4, heartbeat_ms=160))
    await run_until(
        client, new_worker(client), lambda: client.service.calls["CompleteActivityTask"]
    )
    beats = client.service.calls["HeartbeatActivityTask"]
    assert len(beats) >= 2  # a 0.4s attempt, a heartbeat every ~80ms
    assert all(b.lease.task_id == 31 and b.lease.fencing_token == 7 for b in beats)
    details = [payload.decode(b.details.data) for b in beats if b.details.data]
    assert details and details[-1][0].startswith("step-")


async def test_lease_lost_on_heartbeat_stops_the_attempt_without_completing() -> None:
    progress.clear()
    client = FakeClient()
    client.service.errors["HeartbeatActivityTask"].append(LeaseLostError("taken over"))
    await client.service.activity_tasks.put(activity_task(41, "slow", 50, heartbeat_ms=100))
    worker = new_worker(client)
    report = await run_until(client, worker, lambda: client.service.calls["HeartbeatActivityTask"])
    await asyncio.sleep(0.2)
    assert report.lease_losses == 1
    assert worker.lease_losses == 1
    assert not client.service.calls["CompleteActivityTask"]
    assert not client.service.calls["FailActivityTask"]
    assert len(progress) < 10  # the attempt was stopped


async def test_lease_lost_answer_to_a_completion_is_dropped_and_counted() -> None:
    client = FakeClient()
    client.service.errors["CompleteActivityTask"].append(LeaseLostError("stale token"))
    await client.service.activity_tasks.put(activity_task(51, "double", 1))
    report = await run_until(
        client, new_worker(client), lambda: client.service.calls["CompleteActivityTask"]
    )
    assert (report.claims, report.completions, report.lease_losses) == (1, 0, 1)


# --- resilience and shutdown ------------------------------------------------------------


async def test_unavailable_server_backs_off_and_recovers() -> None:
    client = FakeClient()
    client.service.errors["PollActivityTask"].extend(
        StoreUnavailableError("down") for _ in range(3)
    )
    await client.service.activity_tasks.put(activity_task(61, "double", 2))
    worker = new_worker(client, workflows=[])
    report = await run_until(client, worker, lambda: client.service.calls["CompleteActivityTask"])
    assert report.errors == 3
    assert report.completions == 1


async def test_a_poll_retried_after_a_transient_failure_keeps_its_request_id() -> None:
    """Its lost response may hold a claimed task: the server hands that task back only to
    a retry with the same id (tests/e2e/test_idempotent_polls.py). A poll that ended --
    with a task or empty -- is followed by a new one."""
    client = FakeClient()
    client.service.errors["PollActivityTask"].extend(
        StoreUnavailableError("down") for _ in range(2)
    )
    await client.service.activity_tasks.put(activity_task(62, "double", 2))
    worker = new_worker(client, workflows=[])
    one_cycle = WorkflowSupervisorConfig(1).with_backoff(0.01, 0.05)
    polls = client.service.calls["PollActivityTask"]
    await run_until(
        client,
        worker,
        lambda: client.service.calls["CompleteActivityTask"] and len(polls) >= 5,
        one_cycle,
    )
    ids = [p.request_id for p in polls[:5]]
    assert all(ids)
    assert ids[0] == ids[1] == ids[2]  # failed, failed, then the task
    assert len({ids[2], ids[3], ids[4]}) == 3  # each ended poll is followed by a new one


async def test_rpc_errors_become_domain_errors() -> None:
    async def unavailable(_request: object) -> None:
        raise grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "conn refused"
        )

    link = ServerLink("w")
    with pytest.raises(StoreUnavailableError):
        await call(unavailable, None, link)

    status = to_status(LeaseLostError("stale token"))

    async def lease_lost(_request: object) -> None:
        raise grpc.aio.AioRpcError(
            status.code,
            grpc.aio.Metadata(),
            grpc.aio.Metadata(*status.trailing_metadata),
            status.details,
        )

    with pytest.raises(LeaseLostError, match="stale token"):
        await call(lease_lost, None, link)
    assert not link.is_down  # LEASE_LOST is an answer: the server is reachable


async def test_shutdown_drains_a_running_activity_before_deregistering() -> None:
    progress.clear()
    client = FakeClient()
    await client.service.activity_tasks.put(activity_task(71, "slow", 3))
    report = await run_until(client, new_worker(client), lambda: progress)
    # The token was cancelled while the attempt ran: it finished and was reported.
    assert len(progress) == 3
    (complete,) = client.service.calls["CompleteActivityTask"]
    assert payload.decode(complete.result.data) == "finished"
    assert report.completions == 1
    assert len(client.service.calls["DeregisterWorker"]) == 1
