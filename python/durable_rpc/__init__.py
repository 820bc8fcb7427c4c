"""durable-rpc: a durable workflow engine with a gRPC API and a Rust core."""

from __future__ import annotations

from durable_rpc.payload import PayloadError

__all__ = ["PayloadError"]
