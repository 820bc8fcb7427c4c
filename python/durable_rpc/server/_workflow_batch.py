"""BatchWorkflows (issue 16)."""

from __future__ import annotations

from typing import Any

import grpc

from durable_rpc.errors import UnimplementedError


class WorkflowBatchMixin:
    """Not implemented yet (scaffolding of issue 16; replaced by the implementation)."""

    def BatchWorkflows(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise UnimplementedError("BatchWorkflows is not implemented yet")
