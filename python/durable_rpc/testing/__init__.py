"""Testing tools: an in-process server for tests (optionally skipping time) and an
offline replayer that checks recorded histories against the current workflow code.

- :class:`WorkflowEnvironment` — ``start_local()`` / ``start_time_skipping()``: a real
  durable-rpc server on an in-memory SQLite store, on 127.0.0.1, with a connected client.
- :class:`Replayer` — replays exported histories (``durable-rpc workflow history
  --export``) against workflow classes; a CI gate against nondeterministic deploys.
"""

from __future__ import annotations

from durable_rpc.testing._environment import WorkflowEnvironment
from durable_rpc.testing._history import load_history
from durable_rpc.testing._replayer import Replayer, ReplayFailedError, ReplayResult

__all__ = [
    "ReplayFailedError",
    "ReplayResult",
    "Replayer",
    "WorkflowEnvironment",
    "load_history",
]
