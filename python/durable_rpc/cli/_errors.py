"""Expected failures as one line a person can act on, in one place for every command.

The entry point (``_main.Cli.invoke``) hands every exception a command raised to
:func:`explain`; a known one becomes ``Error: <what> (<how to fix>)`` and exit 1, anything
else keeps its traceback, as does everything under ``--debug`` / ``DURABLE_RPC_DEBUG=1``.
"""

from __future__ import annotations

import json

from durable_rpc.errors import DurableRpcError
from durable_rpc.server import ListenError

#: Set to 1 (or pass ``--debug``) to see the traceback behind an ``Error:`` line.
DEBUG_ENV = "DURABLE_RPC_DEBUG"


def explain(exc: BaseException) -> str | None:
    """The one-line message for an expected failure, None for an unexpected one."""
    if isinstance(exc, json.JSONDecodeError):
        return (
            f"the input is not valid JSON: {exc.msg} at column {exc.colno} "
            """(pass JSON, e.g. --input '["order-1", 2]', quoted for your shell)"""
        )
    if isinstance(exc, TimeoutError):
        # A command's own --timeout ran out (the client says what; asyncio's wait_for not).
        what = str(exc) or "timed out waiting"
        return f"{what} (give --timeout more seconds, or omit it to wait until done)"
    if isinstance(exc, ListenError):
        return f"{exc} (stop the process using it, or choose another --listen HOST:PORT)"
    if isinstance(exc, ModuleNotFoundError):
        return _missing_module(exc.name or "")
    if isinstance(exc, DurableRpcError):
        return str(exc)
    return None


def _missing_module(name: str) -> str:
    top = name.partition(".")[0]
    if top == "psycopg":
        return (
            "PostgreSQL support is not installed "
            "(pip install 'durable-rpc[postgres]' for postgresql:// URLs)"
        )
    if name.startswith("opentelemetry.exporter"):
        return (
            "the OTLP trace exporter is not installed "
            "(pip install opentelemetry-exporter-otlp-proto-grpc, or -proto-http)"
        )
    return (
        f"no Python module named {name!r} "
        "(run from the directory that holds it, or add that directory to PYTHONPATH)"
    )
