"""The worker's look at the server before it registers: is its protocol served?"""

from __future__ import annotations

from durable_rpc import _protocol
from durable_rpc.errors import ProtocolVersionUnsupportedError, UnimplementedError
from durable_rpc.v1 import service_pb2
from durable_rpc.worker._client import WorkerClient, call
from durable_rpc.worker._server_link import ServerLink

#: What a server from before GetServerInfo is: it speaks protocol 1 (the protocol as it
#: was when versions were introduced) and advertises nothing.
_PRE_INFO_SERVER = service_pb2.GetServerInfoResponse(
    protocol_version=1, min_protocol_version=1, server_version="unknown (no GetServerInfo)"
)


async def checked_server_info(
    client: WorkerClient, link: ServerLink
) -> service_pb2.GetServerInfoResponse:
    """The server's info; raises ProtocolVersionUnsupportedError (naming both versions)
    when it cannot serve this worker, before the worker registers anything."""
    info: service_pb2.GetServerInfoResponse
    try:
        info = await call(
            client.worker_service.GetServerInfo, service_pb2.GetServerInfoRequest(), link
        )
    except UnimplementedError:
        info = _PRE_INFO_SERVER
    mine = _protocol.PROTOCOL_VERSION
    if not info.min_protocol_version <= mine <= info.protocol_version:
        older = "server" if mine > info.protocol_version else "worker"
        raise ProtocolVersionUnsupportedError(
            f"this worker speaks protocol {mine}; the server (durable-rpc "
            f"{info.server_version}) serves {info.min_protocol_version}.."
            f"{info.protocol_version}: upgrade the {older}"
        )
    return info
