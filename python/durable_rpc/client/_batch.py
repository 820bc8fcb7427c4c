"""Batch actions of the client: one BatchWorkflows stream, followed to its last message."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.errors import StoreUnavailableError
from durable_rpc.v1 import service_pb2

if TYPE_CHECKING:
    from durable_rpc.client._client import Client

Progress = service_pb2.BatchWorkflowsProgress


async def run_batch(
    client: Client,
    request: service_pb2.BatchWorkflowsRequest,
    on_progress: Callable[[Progress], None] | None,
) -> Progress:
    """Streams the batch; ``on_progress`` sees every message (the last one too, which has
    ``done`` set); returns the last one."""
    last = Progress()
    try:
        async for message in client.workflow_service.BatchWorkflows(request):
            last = message
            if on_progress is not None:
                on_progress(message)
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from None
    if not last.done:
        # The stream ended without its final counts: the server went away mid-batch.
        # Re-running the batch with the same batch id is safe.
        raise StoreUnavailableError(
            "the batch stream ended before its final counts; re-run it with the same batch id"
        )
    return last
