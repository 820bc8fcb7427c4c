"""OpenTelemetry through a real server process: spans per RPC, the run's trace context
recorded in history for workers to continue."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_rpc import Client
from tests.e2e.conftest import ServerProcess, eventually

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")


@pytest.fixture
def traced_server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path / "traced.db", tmp_path / "server.log", "--trace-exporter", "console"
    )
    proc.start()
    yield proc
    proc.stop()


async def test_start_records_the_trace_context_and_the_server_exports_spans(
    traced_server: ServerProcess,
) -> None:
    client = await Client.connect(traced_server.address)
    try:
        handle = await client.start_workflow("Traced", id="traced-1", task_queue="t")
        history = await handle.history()
    finally:
        await client.close()
    context = dict(history[0].workflow_started.trace_context)
    assert TRACEPARENT.match(context["traceparent"]), context
    assert traced_server.terminate() == 0  # flushes the batch span processor
    log = traced_server.log_path

    def exported() -> bool:
        return "durable_rpc.v1.WorkflowService/StartWorkflow" in log.read_text()

    await eventually(exported, timeout=10, what="the StartWorkflow span in the export")
    trace_id = context["traceparent"].split("-")[1]
    assert f"0x{trace_id}" in log.read_text(), "the recorded context is the server span's"
