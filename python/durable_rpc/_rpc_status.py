"""Domain errors <-> gRPC statuses carrying google.rpc.ErrorInfo, for both sides."""

from __future__ import annotations

import os
import re
import sys
import tempfile

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from durable_rpc.errors import (
    ERROR_BY_REASON,
    ERROR_DOMAIN,
    STATUS_BY_REASON,
    DurableRpcError,
    InternalError,
    ResourceExhaustedError,
    StoreUnavailableError,
)

# A status message travels in a trailer (grpc-message): past the peer's metadata limit
# (8 KiB by default) the call fails with an opaque error instead of this one.
MAX_MESSAGE_CHARS = 2000


def _server_directories() -> list[str]:
    """Directories of this process that an error text must not reveal (longest first)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = {os.getcwd(), sys.prefix, sys.base_prefix, here, tempfile.gettempdir()}
    found.add(os.path.expanduser("~"))
    return sorted((d.rstrip("/") for d in found if len(d.rstrip("/")) > 1), key=len, reverse=True)


# A server directory and the rest of the path after it, where a path can start.
_SERVER_PATH = re.compile(
    r"(?<![\w./-])(?:"
    + "|".join(re.escape(d) for d in _server_directories())
    + r")(?![\w.-])(?:/[^\s'\"]*)?"
)


def client_text(text: str) -> str:
    """``text`` fit to send to a client: server paths replaced, length capped."""
    text = _SERVER_PATH.sub("<server path>", text)
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 1] + "…"
    return text


def status_message(error: DurableRpcError) -> status_pb2.Status:
    """``error`` as a google.rpc.Status: code from the one table, reason in details."""
    code = STATUS_BY_REASON.get(error.reason, grpc.StatusCode.INTERNAL)
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN))
    return status_pb2.Status(code=code.value[0], message=client_text(str(error)), details=[info])


def to_status(error: DurableRpcError) -> grpc.Status:
    """The status a server sends for ``error``."""
    return rpc_status.to_status(status_message(error))


def error_from_status(status: status_pb2.Status) -> DurableRpcError:
    """The domain error a google.rpc.Status carries (one item of a batch call)."""
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            cls = ERROR_BY_REASON.get(info.reason)
            if cls is not None:
                return cls(status.message.removeprefix(f"{cls.reason}: "))
    return InternalError(f"status {status.code}: {status.message}")


# Sync stubs raise errors that are grpc.Call; aio stubs raise AioRpcError, which is not a
# grpc.Call but offers the same code/details/trailing_metadata accessors.
_CALL_ERRORS = (grpc.Call, grpc.aio.AioRpcError)


def reason_of(error: grpc.RpcError) -> str | None:
    """The ErrorInfo reason carried by a failed call, if any."""
    if not isinstance(error, _CALL_ERRORS):
        return None
    status = rpc_status.from_call(error)
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return str(info.reason)
    return None


def from_rpc_error(error: grpc.RpcError) -> DurableRpcError:
    """The domain error a client raises for a failed call."""
    reason = reason_of(error)
    details = error.details() if isinstance(error, _CALL_ERRORS) else None
    message = details or str(error)
    cls = ERROR_BY_REASON.get(reason or "")
    if cls is not None:
        # The server's message is "REASON: text"; keep only the text.
        prefix = f"{cls.reason}: "
        return cls(message.removeprefix(prefix))
    code = error.code() if isinstance(error, _CALL_ERRORS) else None
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return StoreUnavailableError(f"server unavailable: {message}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        # grpc's own refusal of a message over the receiver's size limit (the server
        # refuses a request over its limit before reading it whole).
        return ResourceExhaustedError(message)
    return InternalError(f"{code}: {message}")


__all__ = ["error_from_status", "from_rpc_error", "reason_of", "status_message", "to_status"]
