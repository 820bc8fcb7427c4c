"""Large payloads by SHA-256 against a real server process and a real worker: payloads
over the inline threshold cross every hop by reference (stored once, verified on every
read), a request or a response never carries them inline, and retention collects the
ones no run references (docs/engine.md, "Large payloads")."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from durable_rpc import Client, Worker, converter
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.client._payload_channel import PayloadChannel
from durable_rpc.errors import (
    PayloadCorruptError,
    PayloadMismatchError,
    PayloadNotFoundError,
    PayloadTooLargeError,
)
from durable_rpc.v1 import (
    history_pb2,
    payload_pb2,
    payload_service_pb2,
    payload_service_pb2_grpc,
    service_pb2,
    service_pb2_grpc,
)
from tests.e2e import payload_app
from tests.e2e.conftest import ServerProcess, eventually

pytestmark = pytest.mark.timeout(180)

MIB = 2**20


def queue() -> str:
    return f"payloads-{uuid.uuid4().hex[:8]}"


def blob_count(server: ServerProcess) -> int:
    with sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT COUNT(*) FROM payload_blobs").fetchone()[0])


def payloads_of(client: Client) -> PayloadChannel:
    channel = client.channel
    assert isinstance(channel, PayloadChannel)
    return channel


async def raw_history(client: Client, workflow_id: str) -> list[history_pb2.HistoryEvent]:
    """The run's history as the server sends it: read past the SDK's payload channel, so
    references stay references."""
    stub = service_pb2_grpc.WorkflowServiceStub(payloads_of(client).channel)
    response = await stub.GetWorkflowHistory(
        service_pb2.GetWorkflowHistoryRequest(workflow_id=workflow_id, page_size=1000)
    )
    return list(response.history.events)


def ref_of(data: bytes) -> payload_pb2.ExternalPayload:
    return payload_pb2.ExternalPayload(sha256=hashlib.sha256(data).digest(), size=len(data))


@pytest.fixture
def grace_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server whose retention looks every 0.2 s and keeps unreferenced payloads 1 s."""
    proc = ServerProcess(
        tmp_path / "durable.db",
        tmp_path / "server.log",
        "--retention-interval",
        "0.2",
        "--payload-grace",
        "1",
    )
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
async def grace_client(grace_server: ServerProcess) -> AsyncIterator[Client]:
    c = await Client.connect(grace_server.address)
    yield c
    await c.close()


async def test_a_5_mib_input_and_activity_result_round_trip_by_reference(
    server: ServerProcess, client: Client
) -> None:
    # Over the server's 4 MiB request limit: refused before, uploaded in chunks now.
    data = os.urandom(5 * MIB)
    q = queue()
    async with Worker(
        client,
        task_queue=q,
        workflows=[payload_app.Digest, payload_app.Echo],
        activities=[payload_app.grow],
    ):
        digest = await client.start_workflow(
            payload_app.Digest.run, data, id="digest", task_queue=q
        )
        grown = data[::-1] * 2
        assert await digest.result(timeout=60) == [
            len(data),
            len(grown),
            hashlib.sha256(grown).hexdigest(),
        ]
        echo = await client.start_workflow(payload_app.Echo.run, grown, id="echo", task_queue=q)
        assert await echo.result(timeout=60) == grown
    # History holds references only: the workflow input, the activity's input and result.
    events = await raw_history(client, "digest")
    started = events[0].workflow_started.input
    assert started.HasField("external") and not started.data
    assert started.external.size > len(data)
    completed = [e for e in events if e.WhichOneof("attributes") == "activity_completed"]
    assert completed[0].activity_completed.result.HasField("external")
    assert sum(e.ByteSize() for e in events) < 64 * 1024
    # Frames: Digest's arguments (its activity's arguments are the same frame, stored
    # once), the activity's result (Echo's result is that frame again), Echo's arguments.
    assert blob_count(server) == 3


async def test_two_starts_with_the_same_input_store_one_payload(
    server: ServerProcess, client: Client
) -> None:
    data = os.urandom(5 * MIB)
    first = await client.start_workflow("Digest", data, id="same-1", task_queue=queue())
    second = await client.start_workflow("Digest", data, id="same-2", task_queue=queue())
    assert first.run_id != second.run_id
    assert blob_count(server) == 1
    refs = [
        (await raw_history(client, h.workflow_id))[0].workflow_started.input
        for h in (first, second)
    ]
    assert refs[0].HasField("external")
    assert refs[0] == refs[1]


async def test_signal_and_query_payloads_cross_by_reference(
    server: ServerProcess, client: Client
) -> None:
    data, extra = os.urandom(300 * 1024), os.urandom(300 * 1024)
    q = queue()
    async with Worker(
        client,
        task_queue=q,
        workflows=[payload_app.Digest],
        activities=[payload_app.grow],
    ):
        handle = await client.start_workflow(
            payload_app.Digest.run, data, True, id="signalled", task_queue=q
        )
        await handle.signal(payload_app.Digest.attach, extra)
        grown = (data + extra)[::-1] * 2
        assert (await handle.result(timeout=60))[1:] == [
            len(grown),
            hashlib.sha256(grown).hexdigest(),
        ]
    signals = [
        e
        for e in await raw_history(client, "signalled")
        if e.WhichOneof("attributes") == "signal_received"
    ]
    assert signals[0].signal_received.input.HasField("external")


@pytest.fixture
def long_lease_server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server whose workflow-task lease (30 s) covers moving a task's 64 MiB payloads
    (the fixture's 2 s does not: the lease is not extended while a worker downloads and
    uploads, docs/engine.md "Large payloads") and that stores payloads over 64 MiB."""
    proc = ServerProcess(
        tmp_path / "durable.db",
        tmp_path / "server.log",
        "--workflow-task-lease",
        "30",
        "--max-payload-bytes",
        str(128 * MIB),
    )
    proc.start()
    yield proc
    proc.stop()


async def test_a_64_mib_payload_round_trips(long_lease_server: ServerProcess) -> None:
    data = os.urandom(64 * MIB)
    async with await Client.connect(
        long_lease_server.address, max_external_payload_bytes=128 * MIB
    ) as client:
        q = queue()
        began = time.monotonic()
        async with Worker(client, task_queue=q, workflows=[payload_app.Echo], activities=[]):
            handle = await client.start_workflow(payload_app.Echo.run, data, id="big", task_queue=q)
            assert await handle.result(timeout=120) == data
        print(f"64 MiB through a workflow and back: {time.monotonic() - began:.1f} s")


async def test_a_response_over_the_download_cap_is_refused_naming_the_cap(
    server: ServerProcess, client: Client
) -> None:
    data = os.urandom(2 * MIB)
    handle = await client.start_workflow("Echo", data, id="capped", task_queue=queue())
    async with await Client.connect(server.address, max_external_payload_bytes=MIB) as small:
        with pytest.raises(PayloadTooLargeError, match=f"max_external_payload_bytes={MIB}"):
            await small.get_handle(handle.workflow_id).history()
    # The server refuses a download over the cap a request names: RESOURCE_EXHAUSTED.
    frame = converter.encode_args([data])
    stub = payload_service_pb2_grpc.PayloadServiceStub(payloads_of(client).channel)
    with pytest.raises(grpc.RpcError) as caught:
        async for _ in stub.DownloadPayload(
            payload_service_pb2.DownloadPayloadRequest(payload=ref_of(frame), max_bytes=MIB)
        ):
            pass
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
    error = from_rpc_error(caught.value)  # type: ignore[arg-type]
    assert error.reason == "PAYLOAD_TOO_LARGE" and str(MIB) in str(error)


async def test_an_upload_that_does_not_match_its_reference_is_refused(
    server: ServerProcess, client: Client
) -> None:
    stub = payload_service_pb2_grpc.PayloadServiceStub(payloads_of(client).channel)
    data = os.urandom(1000)
    with pytest.raises(grpc.RpcError) as caught:
        await stub.UploadPayload(
            payload_service_pb2.UploadPayloadRequest(
                # The right size, another payload's hash.
                payload=payload_pb2.ExternalPayload(
                    sha256=hashlib.sha256(b"x").digest(), size=len(data)
                ),
                offset=0,
                data=data,
            )
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert isinstance(from_rpc_error(caught.value), PayloadMismatchError)  # type: ignore[arg-type]
    # A start referencing a payload never uploaded: NOT_FOUND, and no run.
    missing = payload_pb2.Payload(external=ref_of(data))
    with pytest.raises(PayloadNotFoundError):
        await client.call(
            client.workflow_service.StartWorkflow,
            service_pb2.StartWorkflowRequest(
                workflow_id="dangling", workflow_type="Echo", task_queue="q", input=missing
            ),
        )


async def test_a_corrupted_stored_chunk_is_detected_on_read(
    server: ServerProcess, client: Client
) -> None:
    data = os.urandom(3 * MIB)
    handle = await client.start_workflow("Echo", data, id="corrupt", task_queue=queue())
    with sqlite3.connect(server.db_path) as db:
        changed = db.execute(
            "UPDATE payload_chunks SET data = zeroblob(length(data)) WHERE offset_bytes = ?",
            (MIB,),
        ).rowcount
    assert changed == 1
    with pytest.raises(PayloadCorruptError):
        await handle.history()


async def test_retention_collects_a_payload_no_run_references(
    grace_server: ServerProcess, grace_client: Client
) -> None:
    channel = payloads_of(grace_client)
    loose = converter.encode_args([os.urandom(200 * 1024)])
    held = os.urandom(200 * 1024)
    loose_ref = await channel.upload("default", loose)
    handle = await grace_client.start_workflow("Echo", held, id="held", task_queue=queue())

    async def collected() -> bool:
        try:
            await channel.download("default", loose_ref.sha256, loose_ref.size)
        except PayloadNotFoundError:
            return True
        return False

    await eventually(collected, timeout=30, what="the unreferenced payload collected")
    # The referenced one stays (its run is open), and still reads whole.
    assert blob_count(grace_server) == 1
    started = (await handle.history())[0].workflow_started.input
    assert converter.decode_args(started.data, [bytes]) == [held]
