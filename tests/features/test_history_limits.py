"""History limits and paged workflow-task histories against a real server and worker.

The server runs with small limits so a few signals reach them: responses of at most
200 KB (gRPC's own send limit), history pages of 64 KB, a hard limit of 600 KB and a
warn mark of 300 KB. A history of 320 KB cannot be sent in one message: the worker must
fetch it in pages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from durable_rpc import Client, HistoryLimitExceededError
from durable_rpc.client import WorkflowFailureError
from durable_rpc.v1 import service_pb2
from tests.e2e.conftest import ServerProcess
from tests.features import apps
from tests.features.conftest import FeatureWorker

pytestmark = pytest.mark.timeout(120)

MAX_RESPONSE = 200_000
MAX_BYTES = 600_000
WARN_BYTES = 300_000
CHUNK = 40_000
#: The limits count the bytes history holds: payloads stay inline here (by reference a
#: large payload adds a few dozen bytes; docs/engine.md "Large payloads").
INLINE = ["--inline-threshold", str(4 * 1024 * 1024)]


@pytest.fixture
def small_server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path / "durable.db",
        tmp_path / "server.log",
        "--history-page-bytes",
        "65536",
        "--max-response-bytes",
        str(MAX_RESPONSE),
        "--history-max-bytes",
        str(MAX_BYTES),
        "--history-warn-bytes",
        str(WARN_BYTES),
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
async def small_client(small_server: ServerProcess) -> AsyncIterator[Client]:
    c = await Client.connect(small_server.address, payload_inline_threshold=4 * 1024 * 1024)
    yield c
    await c.close()


@pytest.fixture
def small_worker(
    small_server: ServerProcess,
    queue: str,
    test_log: Path,
    spawn_worker: Callable[..., FeatureWorker],
) -> FeatureWorker:
    return spawn_worker(small_server.address, queue, "--release", *INLINE)


async def _chunks(client: Client, workflow_id: str, count: int) -> None:
    handle = client.get_handle(workflow_id)
    for i in range(count):
        await handle.signal(apps.Budget.chunk, f"{i:06d}" + "c" * CHUNK)


async def test_a_history_larger_than_a_message_completes_through_pages(
    small_client: Client, small_worker: FeatureWorker, queue: str
) -> None:
    handle = await small_client.start_workflow(apps.Budget.run, 0, id="paged", task_queue=queue)
    await _chunks(small_client, "paged", 8)
    await handle.signal(apps.Budget.chunk, "stop")
    result = await handle.result(timeout=60)
    assert result["chunks"] == 8
    events = await handle.history()
    assert sum(len(e.SerializeToString()) for e in events) > MAX_RESPONSE
    # workflow.info() saw the history its last task was handed: through the last
    # marker's last_seen_event_id, every byte of it.
    marker = [e for e in events if e.WhichOneof("attributes") == "workflow_task_completed"][-1]
    seen = marker.workflow_task_completed.last_seen_event_id
    assert result["history_length"] == seen
    assert result["history_size_bytes"] == sum(len(e.SerializeToString()) for e in events[:seen])
    assert result["continue_as_new_suggested"] is True
    described = await small_client.call(
        small_client.workflow_service.DescribeWorkflow,
        service_pb2.DescribeWorkflowRequest(namespace="default", workflow_id="paged"),
    )
    assert "warn mark" in described.history_warning
    assert described.info.history_size_bytes == sum(len(e.SerializeToString()) for e in events)


async def test_a_signal_past_the_limit_is_refused_with_its_reason(
    small_client: Client, small_worker: FeatureWorker, queue: str
) -> None:
    handle = await small_client.start_workflow(apps.Budget.run, 0, id="full", task_queue=queue)
    with pytest.raises(HistoryLimitExceededError) as refused:
        await _chunks(small_client, "full", MAX_BYTES // CHUNK + 1)
    assert refused.value.reason == "HISTORY_LIMIT_EXCEEDED"
    # The run is still fine: it completes when told to.
    await handle.signal(apps.Budget.chunk, "stop")
    result = await handle.result(timeout=60)
    assert result["chunks"] == MAX_BYTES // CHUNK - 1


async def test_a_run_whose_own_command_passes_the_limit_fails_with_that_reason(
    small_client: Client, small_worker: FeatureWorker, queue: str
) -> None:
    handle = await small_client.start_workflow(
        apps.Budget.run, MAX_BYTES + 1, id="bloated", task_queue=queue
    )
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result(timeout=60)
    assert failed.value.failure_type == "HISTORY_LIMIT_EXCEEDED", str(failed.value)
    kinds = [e.WhichOneof("attributes") for e in await handle.history()]
    assert kinds == ["workflow_started", "workflow_task_completed", "workflow_failed"]


async def test_a_start_past_the_limit_is_refused(
    small_client: Client, small_worker: FeatureWorker, queue: str
) -> None:
    with pytest.raises(HistoryLimitExceededError):
        await small_client.start_workflow(
            apps.Budget.run, "x" * (MAX_BYTES + 1), id="too-big", task_queue=queue
        )
