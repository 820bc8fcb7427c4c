"""BatchWorkflows against a real server process: which runs a batch acts on, that a
re-run changes nothing, its rate bound, its refusals, and the CLI's final counts."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
from google.protobuf import duration_pb2

from durable_rpc import Client
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.v1 import service_pb2
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ServerProcess, eventually

pytestmark = pytest.mark.timeout(120)

MATCHING = 30
OTHERS = 5
QUERY = 'WorkflowType = "Batched"'


async def _start_runs(client: Client) -> None:
    """30 open runs the query matches, 5 it does not (no worker: they stay open)."""
    for i in range(MATCHING):
        await client.start_workflow("Batched", id=f"batched-{i}", task_queue="batch-q")
    for i in range(OTHERS):
        await client.start_workflow("Other", id=f"other-{i}", task_queue="batch-q")


async def _statuses(client: Client) -> dict[str, str]:
    return {info.workflow_id: info.status async for info in client.list_workflows()}


async def test_batch_terminate_acts_on_the_matching_runs_once(client: Client) -> None:
    await _start_runs(client)
    # A matching run closed before the batch is skipped, not acted on.
    closed = await client.start_workflow("Batched", id="batched-closed", task_queue="batch-q")
    await closed.terminate("before the batch")
    seen: list[service_pb2.BatchWorkflowsProgress] = []

    final = await client.batch_terminate(
        QUERY, reason="cleanup", batch_id="t1", max_per_second=1000, on_progress=seen.append
    )

    assert (final.matched, final.applied, final.skipped, final.failed) == (
        MATCHING + 1,
        MATCHING,
        1,
        0,
    )
    assert final.done and seen[-1] == final
    assert all(not p.done for p in seen[:-1])
    statuses = await _statuses(client)
    assert sorted(k for k, v in statuses.items() if v == "terminated") == sorted(
        [f"batched-{i}" for i in range(MATCHING)] + ["batched-closed"]
    )
    assert {statuses[f"other-{i}"] for i in range(OTHERS)} == {"running"}
    events = await client.get_handle("batched-7").history()
    assert [e.WhichOneof("attributes") for e in events][-1] == "workflow_terminated"
    assert events[-1].workflow_terminated.reason == "cleanup"

    again = await client.batch_terminate(QUERY, batch_id="t1", max_per_second=1000)
    assert (again.matched, again.applied, again.skipped, again.failed) == (
        MATCHING + 1,
        0,
        MATCHING + 1,
        0,
    )
    assert len(await client.get_handle("batched-7").history()) == len(events)


async def test_batch_signal_twice_with_one_batch_id_delivers_once(client: Client) -> None:
    await _start_runs(client)
    first = await client.batch_signal(QUERY, "poke", 1, batch_id="s1", max_per_second=1000)
    second = await client.batch_signal(QUERY, "poke", 1, batch_id="s1", max_per_second=1000)
    assert (first.matched, first.applied, first.skipped) == (MATCHING, MATCHING, 0)
    assert (second.matched, second.applied, second.skipped) == (MATCHING, 0, MATCHING)
    for i in range(MATCHING):
        events = await client.get_handle(f"batched-{i}").history()
        signals = [e for e in events if e.WhichOneof("attributes") == "signal_received"]
        assert [s.signal_received.signal_name for s in signals] == ["poke"]
    for i in range(OTHERS):
        events = await client.get_handle(f"other-{i}").history()
        assert not [e for e in events if e.WhichOneof("attributes") == "signal_received"]
    # Another batch id is another batch: it signals again.
    third = await client.batch_signal(QUERY, "poke", batch_id="s2", max_per_second=1000)
    assert third.applied == MATCHING


async def test_batch_cancel_requests_each_run_once(client: Client) -> None:
    await _start_runs(client)
    first = await client.batch_cancel(QUERY, reason="drain", batch_id="c1", max_per_second=1000)
    again = await client.batch_cancel(QUERY, reason="drain", batch_id="c1", max_per_second=1000)
    assert (first.applied, first.skipped) == (MATCHING, 0)
    assert (again.applied, again.skipped) == (0, MATCHING)
    events = await client.get_handle("batched-3").history()
    cancels = [e for e in events if e.WhichOneof("attributes") == "cancel_requested"]
    assert [c.cancel_requested.reason for c in cancels] == ["drain"]


async def test_batch_cancel_carries_a_cleanup_timeout(client: Client) -> None:
    await _start_runs(client)
    done = await client.batch_cancel(
        QUERY, reason="drain", cleanup_timeout=timedelta(seconds=1), max_per_second=1000
    )
    assert done.applied == MATCHING
    events = await client.get_handle("batched-7").history()
    (cancel,) = [e for e in events if e.HasField("cancel_requested")]
    deadline = cancel.cancel_requested.cleanup_deadline.ToMilliseconds()
    assert deadline == cancel.event_time.ToMilliseconds() + 1000
    # No worker cleans up: at the deadline the server terminates every cancelled run.

    async def all_terminated() -> bool:
        statuses = await _statuses(client)
        return all(statuses[f"batched-{i}"] == "terminated" for i in range(MATCHING))

    await eventually(all_terminated, what="the cleanup deadline terminating the runs")
    last = (await client.get_handle("batched-7").history())[-1]
    assert last.workflow_terminated.reason == "CLEANUP_DEADLINE_EXCEEDED"
    assert {s for w, s in (await _statuses(client)).items() if w.startswith("other-")} == {
        "running"
    }


async def test_runs_closing_or_starting_under_a_batch_are_not_repeated_or_lost(
    client: Client,
) -> None:
    """Two pages (100 + 30 runs). While the first is being signalled, 5 runs of the second
    close and 5 new matching runs start: the cursor (the row id) does not shift, so the
    closed ones are skipped, the new ones are not part of the batch, and every other run
    gets exactly one signal."""
    total = 130
    for i in range(total):
        await client.start_workflow("Paged", id=f"paged-{i}", task_queue="batch-q")
    changed = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []

    async def change_under_the_batch() -> None:
        for i in range(5):  # the oldest runs: on the second page (newest first)
            await client.get_handle(f"paged-{i}").terminate("closed under the batch")
        for i in range(5):
            await client.start_workflow("Paged", id=f"paged-new-{i}", task_queue="batch-q")
        changed.set()

    def on_progress(p: service_pb2.BatchWorkflowsProgress) -> None:
        if not tasks and 0 < p.applied < 100:
            tasks.append(asyncio.create_task(change_under_the_batch()))

    final = await client.batch_signal(
        'WorkflowType = "Paged"', "poke", batch_id="p1", max_per_second=50, on_progress=on_progress
    )
    assert changed.is_set(), "the runs were not changed while the first page was acted on"
    assert (final.matched, final.applied, final.skipped, final.failed) == (total, 125, 5, 0)
    closed = {f"paged-{i}" for i in range(5)}
    for workflow_id in [f"paged-{i}" for i in range(total)] + [f"paged-new-{i}" for i in range(5)]:
        events = await client.get_handle(workflow_id).history()
        signals = [e for e in events if e.WhichOneof("attributes") == "signal_received"]
        unsignalled = workflow_id.startswith("paged-new") or workflow_id in closed
        assert len(signals) == (0 if unsignalled else 1), workflow_id


async def test_the_rate_bounds_how_fast_runs_are_acted_on(client: Client) -> None:
    await _start_runs(client)
    seen: list[service_pb2.BatchWorkflowsProgress] = []
    began = time.monotonic()
    final = await client.batch_signal(
        QUERY, "poke", batch_id="r1", max_per_second=20, on_progress=seen.append
    )
    took = time.monotonic() - began
    assert final.applied == MATCHING
    # 30 actions at 20 a second: the 30th starts 29/20 = 1.45 s after the first. A lower
    # bound only: the machine's speed can make it slower, never faster.
    assert took >= (MATCHING - 1) / 20
    # Progress came at least once a second while it ran, before the final message.
    assert len(seen) >= 2 and any(0 < p.applied < MATCHING for p in seen)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "query is required"),
        ("   ", "query is required"),
        ('WorkflowType = "x" OR', "expected AND"),
        ("Status = 'sleeping'", "unknown status"),
    ],
)
async def test_a_bad_query_is_refused_before_anything_is_done(
    client: Client, query: str, reason: str
) -> None:
    await client.start_workflow("Batched", id="untouched", task_queue="batch-q")
    with pytest.raises(InvalidArgumentError) as refused:
        await client.batch_terminate(query, batch_id="bad")
    assert reason in str(refused.value)
    assert (await _statuses(client))["untouched"] == "running"


async def test_bad_batch_requests_get_invalid_argument(server: ServerProcess) -> None:
    base = {"namespace": "default", "query": QUERY, "batch_id": "b"}
    cases = [
        (service_pb2.BatchWorkflowsRequest(**base), "an action is required"),
        (
            service_pb2.BatchWorkflowsRequest(**{**base, "batch_id": ""}, terminate_reason="x"),
            "batch_id is required",
        ),
        (
            service_pb2.BatchWorkflowsRequest(**base, terminate_reason="x", max_per_second=1001),
            "max_per_second must be in 1..1000",
        ),
        (
            service_pb2.BatchWorkflowsRequest(**base, signal=service_pb2.BatchSignal()),
            "signal.signal_name is required",
        ),
        (
            service_pb2.BatchWorkflowsRequest(
                **base, cancel_reason="x", cleanup_timeout=duration_pb2.Duration(seconds=-1)
            ),
            "cleanup_timeout must be positive",
        ),
        (
            service_pb2.BatchWorkflowsRequest(
                **base, terminate_reason="x", cleanup_timeout=duration_pb2.Duration(seconds=5)
            ),
            "cleanup_timeout applies to a batch cancel only",
        ),
    ]
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = channel.unary_stream(
            "/durable_rpc.v1.WorkflowService/BatchWorkflows",
            request_serializer=service_pb2.BatchWorkflowsRequest.SerializeToString,
            response_deserializer=service_pb2.BatchWorkflowsProgress.FromString,
        )
        for request, reason in cases:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in stub(request, timeout=10):
                    pass
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, request
            assert reason in (refused.value.details() or ""), refused.value.details()


async def test_cli_batch_terminate_prints_the_final_counts(
    server: ServerProcess, client: Client
) -> None:
    await _start_runs(client)
    done = await run_cli_async(
        "workflow",
        "batch",
        "terminate",
        "--query",
        QUERY,
        "--reason",
        "cli",
        "--rate",
        "1000",
        "--batch-id",
        "cli-1",
        "--json",
        address=server.address,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "batch_id": "cli-1",
        "matched": MATCHING,
        "applied": MATCHING,
        "skipped": 0,
        "failed": 0,
        "last_error": "",
    }
    plain = await run_cli_async(
        "workflow",
        "batch",
        "terminate",
        "--query",
        QUERY,
        "--batch-id",
        "cli-1",
        address=server.address,
    )
    assert plain.returncode == 0, plain.stderr
    assert "matched 30, applied 0, skipped 30, failed 0" in plain.stdout
    refused = await run_cli_async(
        "workflow", "batch", "terminate", "--query", "Nope ~ 1", address=server.address
    )
    assert refused.returncode == 1
    assert "invalid query" in refused.stderr


async def test_cli_batch_cancel_passes_its_cleanup_timeout(
    server: ServerProcess, client: Client
) -> None:
    await _start_runs(client)
    done = await run_cli_async(
        "workflow",
        "batch",
        "cancel",
        "--query",
        QUERY,
        "--cleanup-timeout",
        "1h",
        "--rate",
        "1000",
        address=server.address,
    )
    assert done.returncode == 0, done.stderr
    assert f"matched {MATCHING}, applied {MATCHING}" in done.stdout
    events = await client.get_handle("batched-0").history()
    (cancel,) = [e for e in events if e.HasField("cancel_requested")]
    deadline = cancel.cancel_requested.cleanup_deadline.ToMilliseconds()
    assert deadline == cancel.event_time.ToMilliseconds() + 3_600_000
    bad = await run_cli_async(
        "workflow",
        "batch",
        "cancel",
        "--query",
        QUERY,
        "--cleanup-timeout",
        "soon",
        address=server.address,
    )
    assert bad.returncode != 0 and "soon" in bad.stderr


async def test_a_run_that_fails_is_counted_and_the_batch_goes_on(tmp_path: Path) -> None:
    """A run at its history limit refuses the signal (HISTORY_LIMIT_EXCEEDED): counted as
    failed with its error, and the other runs still get theirs."""
    server = ServerProcess(
        tmp_path / "durable.db",
        tmp_path / "server.log",
        "--history-max-events",
        "2",
        "--history-warn-events",
        "1",
    )
    server.start()
    try:
        async with await Client.connect(server.address) as client:
            for i in range(3):
                await client.start_workflow("Batched", id=f"limited-{i}", task_queue="batch-q")
            assert await client.get_handle("limited-1").signal("poke")  # now at the limit
            final = await client.batch_signal(QUERY, "poke", batch_id="f1", max_per_second=1000)
            assert (final.matched, final.applied, final.skipped, final.failed) == (3, 2, 0, 1)
            assert "limited-1" in final.last_error
            assert "HISTORY_LIMIT_EXCEEDED" in final.last_error
    finally:
        server.stop()
