"""The event loop processes run on: uvloop where it is installed.

uvloop's C event loop roughly halves asyncio's own overhead per gRPC call (measured with
bench/e2e_bench.py); the standard loop remains the fallback (e.g. on Windows).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on uvloop when available."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
