"""ListWorkers and DescribeTaskQueue (issue 16)."""

from __future__ import annotations

from typing import Any

import grpc

from durable_rpc.errors import UnimplementedError


class AdminFleetMixin:
    """Not implemented yet (scaffolding of issue 16; replaced by the implementation)."""

    async def ListWorkers(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise UnimplementedError("ListWorkers is not implemented yet")

    async def DescribeTaskQueue(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise UnimplementedError("DescribeTaskQueue is not implemented yet")
