"""Refused calls cost the server next to nothing (real server process): one without a
valid key is refused from its metadata before its request is received, and a request
over the limit is refused before it is held whole, so floods of large ones do not grow
the server's memory."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import grpc
import pytest

from durable_rpc import Client
from durable_rpc.errors import ResourceExhaustedError
from durable_rpc.v1 import payload_pb2, service_pb2, service_pb2_grpc
from tests.e2e.conftest import eventually
from tests.security.conftest import AuthServer

pytestmark = pytest.mark.timeout(120)

START = "/durable_rpc.v1.WorkflowService/StartWorkflow"
#: A well-formed secret whose key id no key has.
UNKNOWN_KEY = "drpc_0123456789abcdef_" + "A" * 43
MB = 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


class PeakRss:
    """The highest resident size a process reaches while this samples it (a thread)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))


def start_request(data_bytes: int) -> bytes:
    request = service_pb2.StartWorkflowRequest(
        namespace="default",
        workflow_id="flood",
        workflow_type="T",
        task_queue="q",
        input=payload_pb2.Payload(data=b"x" * data_bytes),
    )
    return request.SerializeToString()


async def flood(
    address: str, body: bytes, metadata: tuple[tuple[str, str], ...], calls: int, at_once: int
) -> list[grpc.StatusCode]:
    """``calls`` raw StartWorkflow calls of ``body``, ``at_once`` in flight at a time."""
    slots = asyncio.Semaphore(at_once)
    options = [("grpc.max_send_message_length", 64 * MB)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        start = channel.unary_unary(
            START, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )

        async def one() -> grpc.StatusCode:
            async with slots:
                try:
                    await start(body, metadata=metadata, timeout=60)
                except grpc.aio.AioRpcError as exc:
                    return exc.code()
                return grpc.StatusCode.OK

        return list(await asyncio.gather(*(one() for _ in range(calls))))


@pytest.mark.parametrize(
    ("caller", "refused_with"),
    [
        # Refused as unauthenticated, not as too large: who calls is settled from metadata
        # before the request is received, so a caller without a key learns nothing of it.
        ("no key", grpc.StatusCode.UNAUTHENTICATED),
        ("unknown key", grpc.StatusCode.UNAUTHENTICATED),
        # A valid key's request over the limit is refused before it is held whole.
        ("valid key", grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
)
async def test_a_flood_of_refused_large_calls_does_not_grow_the_server(
    auth_server: AuthServer, caller: str, refused_with: grpc.StatusCode
) -> None:
    assert auth_server.proc is not None
    pid = auth_server.proc.pid
    root: str = auth_server.root_key  # type: ignore[attr-defined]
    key = {"no key": None, "unknown key": UNKNOWN_KEY, "valid key": root}[caller]
    metadata = () if key is None else (("authorization", f"Bearer {key}"),)
    # Small calls first: what a server loads for its first calls is not measured here.
    await flood(auth_server.address, start_request(0), metadata, 2, 2)
    idle = rss_bytes(pid)
    body = start_request(8_000_000)  # under grpc's default limits, over the request limit
    with PeakRss(pid) as rss:
        codes = await flood(auth_server.address, body, metadata, 256, 128)
    assert codes == [refused_with] * 256
    assert rss.peak - idle <= 150 * MB, (
        f"peak {rss.peak // MB} MB against {idle // MB} MB idle during the flood"
    )
    await eventually(
        lambda: rss_bytes(pid) - idle <= 50 * MB,
        timeout=10,
        what=f"the server to settle near its idle {idle // MB} MB",
    )


async def test_a_request_over_the_limit_is_refused_as_too_large(auth_server: AuthServer) -> None:
    """With a valid key, a request over the 4 MiB limit is RESOURCE_EXHAUSTED, refused by
    grpc before it is held whole, and the client raises the matching error."""
    root: str = auth_server.root_key  # type: ignore[attr-defined]
    async with await Client.connect(auth_server.address, api_key=root) as client:
        # Past the SDK's channel, which would move the payload to the payload store.
        stub = service_pb2_grpc.WorkflowServiceStub(client.channel.channel)  # type: ignore[attr-defined]
        request = service_pb2.StartWorkflowRequest.FromString(start_request(4 * MB + 1))
        with pytest.raises(ResourceExhaustedError):
            await client.call(stub.StartWorkflow, request)
        assert [r async for r in client.list_workflows()] == []
