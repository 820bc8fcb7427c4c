"""Workflows and activities of the large-payload tests (tests/e2e/test_large_payloads.py):
``Digest`` hands its (large) input to an activity that answers a large result built from
it, and returns that result's length and SHA-256, with the input's length, so a test can
check every large payload crossed each hop whole."""

from __future__ import annotations

import hashlib
from datetime import timedelta

from durable_rpc import activity, workflow


@activity.defn
async def grow(data: bytes) -> bytes:
    """A result larger than the input and different from it (reversed, twice over)."""
    return data[::-1] * 2


@workflow.defn(name="Digest")
class Digest:
    def __init__(self) -> None:
        self.extra = b""

    @workflow.signal
    def attach(self, data: bytes) -> None:
        self.extra = data

    @workflow.run
    async def run(self, data: bytes, wait_for_signal: bool = False) -> list[object]:
        if wait_for_signal:
            await workflow.wait_condition(lambda: bool(self.extra))
        grown: bytes = await workflow.execute_activity(
            grow, data + self.extra, start_to_close_timeout=timedelta(seconds=60)
        )
        return [len(data), len(grown), hashlib.sha256(grown).hexdigest()]


@workflow.defn(name="Echo")
class Echo:
    @workflow.run
    async def run(self, data: bytes) -> bytes:
        return data
