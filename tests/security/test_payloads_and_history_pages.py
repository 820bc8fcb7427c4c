"""Task history page tokens bound to their claim and key, uploads no other key can
poison, and the bounds on stored payloads (real ``--auth`` server process, real socket)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_rpc import Client, converter
from durable_rpc.errors import (
    InvalidArgumentError,
    LeaseLostError,
    PayloadQuotaExceededError,
    PayloadTooLargeError,
    PermissionDeniedError,
)
from durable_rpc.v1 import admin_service_pb2 as admin_pb
from durable_rpc.v1 import (
    payload_pb2,
    payload_service_pb2,
    payload_service_pb2_grpc,
    service_pb2,
)
from tests.security.conftest import NS_A, AuthServer, Keys, bootstrap_admin_key

pytestmark = pytest.mark.timeout(120)

#: Small history pages, so a run with a few signals has a paged workflow task.
PAGE_BYTES = 1024


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[AuthServer]:
    db = tmp_path / "durable.db"
    root = bootstrap_admin_key(f"sqlite:///{db}")
    server = AuthServer(db, tmp_path / "server.log", "--history-page-bytes", str(PAGE_BYTES))
    server.root_key = root  # type: ignore[attr-defined]
    server.start()
    yield server
    server.stop()


def _history_request(token: bytes) -> service_pb2.GetWorkflowTaskHistoryRequest:
    return service_pb2.GetWorkflowTaskHistoryRequest(namespace=NS_A, next_page_token=token)


async def test_task_history_pages_reach_only_the_claims_key_while_its_lease_holds(
    auth_server: AuthServer, keys: Keys
) -> None:
    async with await Client.connect(auth_server.address, namespace=NS_A, api_key=keys.client) as c:
        handle = await c.start_workflow("Card", "4111 " * 300, id="card-1", task_queue="q")
        for n in range(4):
            await handle.signal("note", str(n) * PAGE_BYTES)
    poll = service_pb2.PollWorkflowTaskRequest(namespace=NS_A, task_queue="q", worker_id="w1")
    async with (
        await Client.connect(auth_server.address, api_key=keys.worker) as owner,
        await Client.connect(auth_server.address, api_key=keys.worker_2) as other,
    ):
        task = await owner.call(owner.worker_service.PollWorkflowTask, poll, timeout=10)
        assert task.next_page_token and len(task.history.events) < task.history_length
        # A token written by hand, naming the run: refused, nothing of the history served.
        for forged in (f"{task.run_id} 0 999".encode(), task.next_page_token[:-1] + b"}"):
            with pytest.raises(InvalidArgumentError, match="next_page_token"):
                await other.call(
                    other.worker_service.GetWorkflowTaskHistory, _history_request(forged)
                )
        # The real token, from another worker key: refused.
        with pytest.raises(PermissionDeniedError):
            await other.call(
                other.worker_service.GetWorkflowTaskHistory,
                _history_request(task.next_page_token),
            )
        # The claim's own key pages the whole history, page by page.
        events = list(task.history.events)
        token = task.next_page_token
        while token:
            page = await owner.call(
                owner.worker_service.GetWorkflowTaskHistory, _history_request(token)
            )
            assert page.history.events
            events.extend(page.history.events)
            token = page.next_page_token
        assert [e.event_id for e in events] == list(range(1, task.history_length + 1))
        # Once the lease is gone (the task failed), its tokens serve nothing more.
        lease = service_pb2.Lease(
            task_id=task.task_id, worker_id="w1", fencing_token=task.fencing_token
        )
        await owner.call(
            owner.worker_service.FailWorkflowTask,
            service_pb2.FailWorkflowTaskRequest(namespace=NS_A, lease=lease),
        )
        with pytest.raises(LeaseLostError):
            await owner.call(
                owner.worker_service.GetWorkflowTaskHistory,
                _history_request(task.next_page_token),
            )


def _upload(
    sha256: bytes, size: int, data: bytes = b"", offset: int = 0
) -> payload_service_pb2.UploadPayloadRequest:
    return payload_service_pb2.UploadPayloadRequest(
        namespace=NS_A,
        payload=payload_pb2.ExternalPayload(sha256=sha256, size=size),
        offset=offset,
        data=data,
    )


async def _upload_call(client: Client, request: payload_service_pb2.UploadPayloadRequest) -> None:
    stub = payload_service_pb2_grpc.PayloadServiceStub(client.channel)
    await client.call(stub.UploadPayload, request)


def _input_frame(client_value: str) -> tuple[bytes, int]:
    """The SHA-256 and size of the frame a client uploads for ``client_value`` as a
    workflow's input (the same bytes the SDK will send)."""
    frame = converter.encode_args((client_value,))
    return hashlib.sha256(frame).digest(), len(frame)


@pytest.mark.parametrize("attack", ["wrong size, no data", "right size, wrong leading bytes"])
async def test_another_keys_unfinished_upload_does_not_block_a_correct_one(
    auth_server: AuthServer, keys: Keys, attack: str
) -> None:
    value = "x" * 200_000
    sha, size = _input_frame(value)
    async with await Client.connect(auth_server.address, api_key=keys.worker) as attacker:
        if attack == "wrong size, no data":
            await _upload_call(attacker, _upload(sha, 1))
        else:
            await _upload_call(attacker, _upload(sha, size, b"\0" * 1000))
    async with await Client.connect(auth_server.address, namespace=NS_A, api_key=keys.client) as c:
        handle = await c.start_workflow("Big", value, id="big-1", task_queue="q")
        assert (await handle.describe()).info.status == "running"


async def test_an_upload_declaring_more_than_the_server_stores_is_refused(
    auth_server: AuthServer, keys: Keys
) -> None:
    async with await Client.connect(auth_server.address, api_key=keys.worker) as worker:
        for size in (2**63 - 1, 2**64 - 1):
            with pytest.raises(PayloadTooLargeError, match="max_external_payload_bytes"):
                await _upload_call(worker, _upload(b"\1" * 32, size, b"data"))
    assert "Traceback" not in auth_server.log_path.read_text()


async def test_uploads_past_the_namespace_payload_quota_are_refused(
    auth_server: AuthServer, keys: Keys
) -> None:
    async with await Client.connect(auth_server.address, api_key=keys.root) as root:
        updated = await root.call(
            root.admin_service.UpdateNamespace,
            admin_pb.UpdateNamespaceRequest(namespace=NS_A, payload_quota_bytes=300_000),
        )
        assert updated.namespace.payload_quota_bytes == 300_000
    async with await Client.connect(auth_server.address, namespace=NS_A, api_key=keys.client) as c:
        await c.start_workflow("Big", "a" * 200_000, id="big-1", task_queue="q")
        with pytest.raises(PayloadQuotaExceededError, match="300000"):
            await c.start_workflow("Big", "b" * 200_000, id="big-2", task_queue="q")
    async with await Client.connect(auth_server.address, api_key=keys.admin) as admin:
        described = await admin.call(
            admin.admin_service.DescribeNamespace,
            admin_pb.DescribeNamespaceRequest(namespace=NS_A),
        )
    assert described.namespace.payload_quota_bytes == 300_000
    assert 200_000 < described.namespace.payload_stored_bytes < 300_000
