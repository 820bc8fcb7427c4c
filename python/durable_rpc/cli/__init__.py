"""The ``durable-rpc`` command line."""

from __future__ import annotations

from durable_rpc.cli._main import main

__all__ = ["main"]
