"""Server replicas on PostgreSQL and workers as real processes, reusing tests/e2e's
helpers. Replicas are reached through one gRPC target naming every replica
(``ipv4:127.0.0.1:P1,127.0.0.1:P2``): the channel fails over when a replica dies, as it
would behind a DNS name with one record per replica in production."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from durable_rpc.client import WorkflowHandle
from durable_rpc.errors import StoreUnavailableError
from durable_rpc.store import Store
from durable_rpc.v1 import history_pb2
from tests.e2e.conftest import ServerProcess


class PgServerProcess(ServerProcess):
    """`durable-rpc server --db postgresql://...`, restartable on the same port."""

    def __init__(self, db_url: str, log_path: Path, *extra: str) -> None:
        super().__init__(log_path.with_suffix(".unused"), log_path, *extra, db_url=db_url)


def target(*replicas: ServerProcess) -> str:
    """One gRPC target for several replicas, tried in this order (pick_first)."""
    return "ipv4:" + ",".join(r.address for r in replicas)


async def result_retrying(handle: WorkflowHandle, timeout: float = 90.0) -> Any:
    """The run's result; UNAVAILABLE (a replica or the database going away) is retried,
    as a client application would."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            return await handle.result(timeout=max(1.0, deadline - loop.time()))
        except StoreUnavailableError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


async def full_history(store: Store, workflow_id: str) -> list[history_pb2.HistoryEvent]:
    page = await store.get_history("default", workflow_id, None, 0, 100_000)
    assert not page.has_more
    return [history_pb2.HistoryEvent.FromString(e) for e in page.events]


def check_history(events: Sequence[history_pb2.HistoryEvent]) -> dict[int, int]:
    """Gapless, duplicate-free event ids, one outcome per activity, one close. Returns
    {activity seq: attempt that completed it}."""
    ids = [e.event_id for e in events]
    assert ids == list(range(1, len(ids) + 1)), f"event ids {ids}"
    completed: dict[int, int] = {}
    closes = 0
    for event in events:
        kind = event.WhichOneof("attributes")
        if kind == "activity_completed":
            seq = event.activity_completed.seq
            assert seq not in completed, f"activity seq {seq} completed twice"
            completed[seq] = event.activity_completed.attempt
        elif kind in ("workflow_completed", "workflow_failed", "workflow_terminated"):
            closes += 1
    assert closes == 1, [e.WhichOneof("attributes") for e in events]
    return completed
