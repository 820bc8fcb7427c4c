"""RedriveWorkflow (issue 16)."""

from __future__ import annotations

from typing import Any

import grpc

from durable_rpc.errors import UnimplementedError


class WorkflowRedriveMixin:
    """Not implemented yet (scaffolding of issue 16; replaced by the implementation)."""

    async def RedriveWorkflow(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise UnimplementedError("RedriveWorkflow is not implemented yet")
