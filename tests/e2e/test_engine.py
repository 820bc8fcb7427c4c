"""The engine end to end: a real server process, real sockets, a real SQLite file (and,
for the tests marked ``also_on_postgres``, a real PostgreSQL database)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from durable_rpc import Client, Worker
from durable_rpc._rpc_status import reason_of
from durable_rpc.client import WorkflowHandle
from durable_rpc.errors import (
    InvalidArgumentError,
    InvalidPayloadError,
    LeaseLostError,
    WorkflowAlreadyStartedError,
)
from durable_rpc.v1 import payload_pb2, service_pb2, service_pb2_grpc, workflow_task_pb2
from tests.e2e import apps
from tests.e2e.conftest import ServerProcess, WorkerProcess, eventually, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def test_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "executions.log"
    path.touch()
    monkeypatch.setenv("DURABLE_RPC_TEST_LOG", str(path))
    return path


def lines(path: Path, prefix: str) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith(prefix)]


def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


def kinds(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.WhichOneof("attributes") for e in events]


@pytest.mark.also_on_postgres
async def test_worker_sigkill_after_first_activity_resumes_without_rerunning_it(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., WorkerProcess],
    test_log: Path,
) -> None:
    q = queue()
    first = spawn_worker(server.address, q)
    handle = await client.start_workflow(apps.TwoSteps.run, "crash", id="crash-1", task_queue=q)
    wait_for(lambda: lines(test_log, "slow_step-start"), what="second activity to start")
    first.kill()
    spawn_worker(server.address, q, "--release")
    assert await handle.result(timeout=60) == ["done:crash-1", "done:crash-2"]
    assert len(lines(test_log, "step:crash-1")) == 1, "completed activity ran again"
    history = await handle.history()
    completed = [e.activity_completed for e in history if e.HasField("activity_completed")]
    assert (completed[0].seq, completed[0].attempt) == (1, 1)
    assert completed[1].attempt >= 2, "the killed attempt cannot have completed"
    assert kinds(history)[-1] == "workflow_completed"


async def test_side_effect_value_survives_a_worker_sigkill_and_runs_once(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., WorkerProcess],
    test_log: Path,
) -> None:
    q = queue()
    first = spawn_worker(server.address, q)
    handle = await client.start_workflow(apps.SideEffects.run, "se", id="se-1", task_queue=q)
    wait_for(lambda: lines(test_log, "slow_step-start"), what="the activity to start")
    first.kill()
    # The new worker replays the first task: the token comes from history.
    spawn_worker(server.address, q, "--release")
    token, patched, done, again = await handle.result(timeout=60)
    minted = [line.split()[0].removeprefix("side_effect:") for line in lines(test_log, "side_")]
    assert minted == [token, again], "each side-effect function ran exactly once"
    assert token != again
    assert (patched, done) == ("True", "done:se-1")
    history = await handle.history()
    markers = [
        (e.marker_recorded.seq, e.marker_recorded.kind, e.marker_recorded.id)
        for e in history
        if e.HasField("marker_recorded")
    ]
    assert markers == [(1, "side_effect", ""), (0, "patch", "tokens-v2"), (3, "side_effect", "")]
    scheduled = [e.activity_scheduled.seq for e in history if e.HasField("activity_scheduled")]
    assert scheduled == [2], "the patch marker takes no seq"


@pytest.mark.also_on_postgres
async def test_server_sigkill_mid_run_loses_nothing(
    server: ServerProcess, spawn_worker: Callable[..., WorkerProcess], test_log: Path
) -> None:
    q = queue()
    spawn_worker(server.address, q, "--release")
    client = await Client.connect(server.address)
    handle = await client.start_workflow(apps.Sleeper.run, 1.5, id="restart-1", task_queue=q)
    await eventually(lambda: _has_event(handle, "timer_started"), what="the timer to be recorded")
    await client.close()
    server.kill()
    server.start()
    client = await Client.connect(server.address)
    try:
        handle = client.get_handle("restart-1")
        assert await handle.result(timeout=60) == "woke"
        history = await handle.history()
        assert kinds(history).count("timer_fired") == 1
        assert [e.event_id for e in history] == list(range(1, len(history) + 1))
    finally:
        await client.close()


async def _has_event(handle: WorkflowHandle, kind: str) -> bool:
    return kind in kinds(await handle.history())


@pytest.mark.also_on_postgres
async def test_timer_survives_restart_and_fires_once(
    server: ServerProcess, client: Client, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    q = queue()
    worker = spawn_worker(server.address, q)
    handle = await client.start_workflow(apps.Sleeper.run, 1.0, id="timer-1", task_queue=q)
    await eventually(lambda: _has_event(handle, "timer_started"), what="timer started")
    worker.kill()
    server.terminate()  # graceful this time: SIGTERM
    server.start()
    spawn_worker(server.address, q)
    c2 = await Client.connect(server.address)
    try:
        h2 = c2.get_handle("timer-1")
        assert await h2.result(timeout=60) == "woke"
        assert kinds(await h2.history()).count("timer_fired") == 1
    finally:
        await c2.close()


@pytest.mark.also_on_postgres
async def test_signals_are_deduplicated_by_request_id(
    server: ServerProcess, client: Client, spawn_worker: Callable[..., WorkerProcess]
) -> None:
    q = queue()
    spawn_worker(server.address, q)
    handle = await client.start_workflow(apps.Collector.run, id="signals-1", task_queue=q)
    assert await handle.signal(apps.Collector.add, "apple", request_id="r1") is True
    assert await handle.signal(apps.Collector.add, "apple", request_id="r1") is False
    assert await handle.signal(apps.Collector.add, "pear", request_id="r2") is True
    assert await handle.signal(apps.Collector.add, "done", request_id="r3") is True
    assert await handle.result(timeout=30) == ["apple", "pear"]
    assert kinds(await handle.history()).count("signal_received") == 3


@pytest.mark.also_on_postgres
async def test_non_idempotent_activity_fails_closed_when_its_worker_dies(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., WorkerProcess],
    test_log: Path,
) -> None:
    q = queue()
    first = spawn_worker(server.address, q)
    handle = await client.start_workflow(apps.Charge.run, 100, id="charge-1", task_queue=q)
    wait_for(lambda: lines(test_log, "charge-start"), what="the charge to start")
    first.kill()
    spawn_worker(server.address, q, "--release")
    result = await handle.result(timeout=60)
    assert result.startswith("ambiguous:"), result
    assert len(lines(test_log, "charge-start")) == 1, "a non-idempotent effect was re-run"
    failed = [e.activity_failed for e in await handle.history() if e.HasField("activity_failed")]
    assert len(failed) == 1 and failed[0].ambiguous
    assert failed[0].failure.type == "AmbiguousEffectError"


@pytest.mark.also_on_postgres
async def test_stale_lease_gets_lease_lost_and_changes_nothing(
    server: ServerProcess, client: Client
) -> None:
    q = queue()
    handle = await client.start_workflow("Anything", id="stale-1", task_queue=q)
    stub = client.worker_service
    poll = service_pb2.PollWorkflowTaskRequest(namespace="default", task_queue=q, worker_id="w1")
    first = await stub.PollWorkflowTask(poll)
    assert first.task_id and first.fencing_token == 1
    second = service_pb2.PollWorkflowTaskResponse()

    async def taken_over() -> bool:
        nonlocal second
        second = await stub.PollWorkflowTask(
            service_pb2.PollWorkflowTaskRequest(namespace="default", task_queue=q, worker_id="w2")
        )
        return bool(second.task_id)

    await eventually(taken_over, timeout=30, what="the expired lease to be taken over")
    assert second.task_id == first.task_id and second.fencing_token == 2
    complete = workflow_task_pb2.Command(
        seq=1,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(
            result=payload_pb2.Payload(data=apps_payload("stale"))
        ),
    )

    def request(resp: service_pb2.PollWorkflowTaskResponse, worker: str, value: str) -> object:
        cmd = workflow_task_pb2.Command()
        cmd.CopyFrom(complete)
        cmd.complete_workflow.result.data = apps_payload(value)
        return service_pb2.CompleteWorkflowTaskRequest(
            namespace="default",
            lease=service_pb2.Lease(
                task_id=resp.task_id, worker_id=worker, fencing_token=resp.fencing_token
            ),
            last_seen_event_id=resp.history.events[-1].event_id,
            commands=[cmd],
        )

    before = await handle.history()
    with pytest.raises(LeaseLostError):
        await client.call(stub.CompleteWorkflowTask, request(first, "w1", "stale"))
    assert await handle.history() == before, "a stale writer changed history"
    await client.call(stub.CompleteWorkflowTask, request(second, "w2", "fresh"))
    # The same completion again is idempotent.
    await client.call(stub.CompleteWorkflowTask, request(second, "w2", "fresh"))
    assert await handle.result(timeout=10) == "fresh"
    with pytest.raises(LeaseLostError):
        await client.call(stub.CompleteWorkflowTask, request(first, "w1", "stale"))


def apps_payload(value: object) -> bytes:
    from durable_rpc import payload

    return payload.encode(value)


async def test_nondeterminism_fails_the_task_not_the_run_and_compatible_code_recovers(
    server: ServerProcess,
    client: Client,
    spawn_worker: Callable[..., WorkerProcess],
    test_log: Path,
) -> None:
    q = queue()
    v1 = spawn_worker(server.address, q, "--variant", "v1")
    handle = await client.start_workflow(apps.EvolvingV1.run, id="evolve-1", task_queue=q)
    wait_for(lambda: lines(test_log, "step:a"), what="first activity")
    await eventually(lambda: _has_event(handle, "activity_completed"), what="a completed")
    v1.stop()
    v2 = spawn_worker(server.address, q, "--variant", "v2")
    await handle.signal("proceed")

    async def task_failed() -> bool:
        d = await handle.describe()
        return d.last_workflow_task_failure is not None

    await eventually(task_failed, what="the workflow task to fail")
    description = await handle.describe()
    assert description.info.status == "running"
    failure = description.last_workflow_task_failure
    assert failure is not None and failure.type == "NondeterminismError"
    assert "seq 1" in failure.message or "seq=1" in failure.message
    assert kinds(await handle.history()).count("workflow_completed") == 0
    # Roll back to compatible code (the incompatible deployment is stopped): the run
    # completes from where it stood.
    v2.stop()
    spawn_worker(server.address, q, "--variant", "v1")
    assert await handle.result(timeout=60) == "done:a+done:b"


async def test_bad_input_gets_clear_statuses_and_changes_nothing(
    server: ServerProcess, client: Client
) -> None:
    stub = client.workflow_service
    bad = service_pb2.StartWorkflowRequest(
        namespace="default",
        workflow_id="bad-1",
        workflow_type="X",
        task_queue="q",
        input=payload_pb2.Payload(data=b"\xc3\x01garbage"),
    )
    with pytest.raises(InvalidPayloadError):
        await client.call(stub.StartWorkflow, bad)
    missing = service_pb2.StartWorkflowRequest(namespace="default", workflow_id="bad-2")
    with pytest.raises(InvalidArgumentError):
        await client.call(stub.StartWorkflow, missing)
    runs = [r async for r in client.list_workflows()]
    assert runs == []
    # Wrong task ids are fenced like stale leases.
    with pytest.raises(LeaseLostError):
        await client.call(
            client.worker_service.CompleteWorkflowTask,
            service_pb2.CompleteWorkflowTaskRequest(
                lease=service_pb2.Lease(task_id=999, worker_id="w", fencing_token=1)
            ),
        )
    # Garbage bytes where a protobuf message should be.
    raw = client.channel.unary_unary(
        "/durable_rpc.v1.WorkflowService/StartWorkflow",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await raw(b"\xff\xff\xff\xff\x0f")
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason_of(info.value) == "INVALID_ARGUMENT"
    # Oversized request, sent past the SDK's payload channel (which would upload the
    # 5 MiB payload and send a reference): the server's request limit still holds.
    inner_channel = client.channel.channel  # type: ignore[attr-defined]
    stub = service_pb2_grpc.WorkflowServiceStub(inner_channel)
    huge = service_pb2.StartWorkflowRequest(
        namespace="default",
        workflow_id="big",
        workflow_type="X",
        task_queue="q",
        input=payload_pb2.Payload(data=apps_payload("x" * (5 * 1024 * 1024))),
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stub.StartWorkflow(huge)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert [r async for r in client.list_workflows()] == []


@pytest.mark.also_on_postgres
async def test_start_is_idempotent_by_request_id(server: ServerProcess, client: Client) -> None:
    h1 = await client.start_workflow("T", id="idem-1", task_queue="q", request_id="req-1")
    h2 = await client.start_workflow("T", id="idem-1", task_queue="q", request_id="req-1")
    assert h1.run_id == h2.run_id
    with pytest.raises(WorkflowAlreadyStartedError):
        await client.start_workflow("T", id="idem-1", task_queue="q", request_id="req-2")


async def test_unknown_workflow_type_is_not_claimed_and_describe_says_why(
    server: ServerProcess, client: Client
) -> None:
    q = queue()
    async with Worker(client, task_queue=q, workflows=[apps.Sleeper], activities=[]):
        # A run the worker can run is claimed; the unknown type's run never is (workers
        # claim only the definitions they registered), so no failed attempt piles up.
        known = await client.start_workflow(apps.Sleeper.run, 3600, id="known-1", task_queue=q)
        handle = await client.start_workflow("NoSuchWorkflow", id="unknown-1", task_queue=q)
        await eventually(lambda: _has_event(known, "timer_started"), what="timer")
        description = await handle.describe()
    assert description.info.status == "running"
    assert description.definition_available is False
    assert description.last_workflow_task_failure is None
    assert [e.WhichOneof("attributes") for e in await handle.history()] == ["workflow_started"]
    assert "'NoSuchWorkflow'" in description.definition_unavailable_reason


async def test_cancel_reaches_workflow_code_and_terminate_ends_the_run(
    server: ServerProcess, client: Client
) -> None:
    q = queue()
    async with Worker(client, task_queue=q, workflows=[apps.Sleeper], activities=[]):
        sleeping = await client.start_workflow(apps.Sleeper.run, 3600, id="cancel-1", task_queue=q)
        await eventually(lambda: _has_event(sleeping, "timer_started"), what="timer")
        await sleeping.cancel("no longer needed")
        from durable_rpc.client import WorkflowCancelledError, WorkflowTerminatedError

        with pytest.raises(WorkflowCancelledError):
            await sleeping.result(timeout=30)
        other = await client.start_workflow(apps.Sleeper.run, 3600, id="term-1", task_queue=q)
        await other.terminate("operator")
        with pytest.raises(WorkflowTerminatedError):
            await other.result(timeout=30)


async def test_graceful_sigterm_exits_zero(server: ServerProcess) -> None:
    assert server.terminate() == 0
    assert server.db_path.stat().st_size > 0


@pytest.mark.also_on_postgres
async def test_many_concurrent_workflows_complete(server: ServerProcess, client: Client) -> None:
    q = queue()
    async with Worker(
        client, task_queue=q, workflows=[apps.TwoSteps], activities=[apps.step, apps.slow_step]
    ):
        apps.RELEASED = True
        handles = await asyncio.gather(
            *(
                client.start_workflow(apps.TwoSteps.run, f"m{i}", id=f"many-{i}", task_queue=q)
                for i in range(40)
            )
        )
        results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    assert results == [[f"done:m{i}-1", f"done:m{i}-2"] for i in range(40)]
