"""A workflow task's whole history, fetched in pages, and the worker's history warnings.

The server bounds a PollWorkflowTaskResponse in bytes: a long history arrives as its
first page and a ``next_page_token``; the rest comes from GetWorkflowTaskHistory, one
bounded page per call, until the token is empty (the claim's history length).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from durable_rpc.v1 import service_pb2
from durable_rpc.worker._client import call
from durable_rpc.worker._server_link import ServerLink

if TYPE_CHECKING:
    from durable_rpc.v1.service_pb2_grpc import WorkerServiceAsyncStub

log = logging.getLogger("durable_rpc.worker")

# Runs warned about are remembered up to this many (then forgotten all at once), so a
# long-lived worker's memory stays bounded and a run is logged about again now and then.
_WARNED_RUNS_KEPT = 10_000


async def fetch_rest_of_history(
    stub: WorkerServiceAsyncStub,
    namespace: str,
    task: service_pb2.PollWorkflowTaskResponse,
    link: ServerLink,
) -> None:
    """Appends the pages after the first to ``task.history`` (nothing when it is whole)."""
    token = task.next_page_token
    while token:
        page = await call(
            stub.GetWorkflowTaskHistory,
            service_pb2.GetWorkflowTaskHistoryRequest(namespace=namespace, next_page_token=token),
            link,
        )
        task.history.events.extend(page.history.events)
        token = page.next_page_token
    task.next_page_token = b""


class HistoryWarnings:
    """Logs once per run that its history passed the server's warn mark."""

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def check(self, task: service_pb2.PollWorkflowTaskResponse, warn: tuple[int, int]) -> bool:
        """Whether ``task``'s run is past the warn mark (logged the first time)."""
        warn_events, warn_bytes = warn
        if task.history_length < warn_events and task.history_size_bytes < warn_bytes:
            return False
        if task.run_id not in self._warned:
            if len(self._warned) >= _WARNED_RUNS_KEPT:
                self._warned.clear()
            self._warned.add(task.run_id)
            log.warning(
                "workflow %s run %s: history has %d events and %d bytes, past the warn mark "
                "(%d events or %d bytes); it should continue-as-new before the hard limit "
                "fails it (HISTORY_LIMIT_EXCEEDED)",
                task.workflow_id,
                task.run_id,
                task.history_length,
                task.history_size_bytes,
                warn_events,
                warn_bytes,
            )
        return True
