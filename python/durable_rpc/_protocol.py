"""The worker protocol: its version, the capability names, and the server's release.

Shared by the server (what it advertises in GetServerInfo and accepts in RegisterWorker)
and the worker SDK (what it sends and requires), so both sides name the same things.
Raise ``PROTOCOL_VERSION`` when a change makes an older server unable to serve a newer
worker correctly (a new required RPC or field meaning), and ``MIN_PROTOCOL_VERSION``
only when the server drops what older workers rely on. A feature a peer may lack is a
capability instead: negotiated at registration, never assumed.
"""

from __future__ import annotations

import functools
from importlib import metadata

#: The newest worker protocol this code speaks (worker and server alike).
PROTOCOL_VERSION = 1
#: The oldest worker protocol the server still serves.
MIN_PROTOCOL_VERSION = 1

#: What this server supports, by stable name (docs/engine.md, "Protocol and capabilities").
SERVER_CAPABILITIES: tuple[str, ...] = (
    "query_tasks",  # PollQueryTask / RespondQueryTask
    "workflow_updates",  # DoUpdate jobs and update commands
    "sticky_execution",  # workflow tasks carry only new events for a cached run
    "eager_activity_dispatch",  # CompleteWorkflowTask hands back activities to run
    "complete_tasks_batch",  # CompleteTasks
    "paged_task_history",  # GetWorkflowTaskHistory
    "build_ids",  # runs pinned to the build that started them
    "durable_selection",  # parallel / selection / selection_winner markers (parallel groups)
)

#: What the Python worker uses when the server offers it.
WORKER_CAPABILITIES: tuple[str, ...] = SERVER_CAPABILITIES


def served(version: int) -> bool:
    """Whether the server serves a worker speaking ``version`` (0: unset, i.e. 1)."""
    return MIN_PROTOCOL_VERSION <= (version or 1) <= PROTOCOL_VERSION


@functools.cache
def server_version() -> str:
    """The installed durable-rpc release (``0+unknown`` when run from a bare tree)."""
    try:
        return metadata.version("durable-rpc")
    except metadata.PackageNotFoundError:
        return "0+unknown"
