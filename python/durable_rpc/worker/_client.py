"""What the worker needs from a client, and the one place RPC errors become domain errors."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

import grpc
import grpc.aio

from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.errors import (
    DurableRpcError,
)
from durable_rpc.worker._server_link import ServerLink

if TYPE_CHECKING:
    from durable_rpc.v1.service_pb2_grpc import WorkerServiceAsyncStub

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


class WorkerClient(Protocol):
    """A connected client: its namespace and an aio ``WorkerService`` stub."""

    @property
    def namespace(self) -> str: ...

    @property
    def worker_service(self) -> WorkerServiceAsyncStub: ...


async def call(
    method: Callable[[_Req], Awaitable[_Resp]], request: _Req, link: ServerLink
) -> _Resp:
    """Invoke ``method``; a failed call raises the DurableRpcError its status names
    (LeaseLostError, StoreUnavailableError, ...), never a raw grpc.RpcError. ``link``
    learns how it ended (it logs the server's loss and return; callers do not log
    transient failures)."""
    started = time.monotonic()
    try:
        response = await method(request)
    except grpc.RpcError as error:
        domain = domain_error(error)
        link.observe(started, domain)
        raise domain from error
    link.observe(started, None)
    return response


def domain_error(error: grpc.RpcError) -> DurableRpcError:
    return from_rpc_error(error)
