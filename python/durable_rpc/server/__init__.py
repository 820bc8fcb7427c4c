"""The durable-rpc gRPC server: WorkflowService and WorkerService over one Store."""

from __future__ import annotations

from durable_rpc.server._app import ListenError, Server, ServerConfig

__all__ = ["ListenError", "Server", "ServerConfig"]
