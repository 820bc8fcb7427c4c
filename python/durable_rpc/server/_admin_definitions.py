"""ListDefinitions, RemoveDefinition and RestoreDefinition (issue 16)."""

from __future__ import annotations

from typing import Any

import grpc

from durable_rpc.errors import UnimplementedError


class AdminDefinitionsMixin:
    """Not implemented yet (scaffolding of issue 16; replaced by the implementation)."""

    async def ListDefinitions(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise UnimplementedError("ListDefinitions is not implemented yet")

    async def RemoveDefinition(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise UnimplementedError("RemoveDefinition is not implemented yet")

    async def RestoreDefinition(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        raise UnimplementedError("RestoreDefinition is not implemented yet")
