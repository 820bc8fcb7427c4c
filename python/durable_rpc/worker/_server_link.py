"""Whether a worker can reach its server, logged as transitions only.

During an outage every poll, heartbeat and report retry fails, each on its own backoff:
logging each failure buried the one fact that matters under a hundred lines. Every call
the worker makes goes through ``_client.call``, which tells the link how it ended; the
link logs one line when the server is lost and one when it is back (with how long the
outage lasted), and callers stay silent about transient failures.
"""

from __future__ import annotations

import logging
import time

from durable_rpc.errors import DurableRpcError, StoreUnavailableError

log = logging.getLogger("durable_rpc.worker")


def is_transient(error: BaseException) -> bool:
    """A failure that says nothing about the call, only that the server (or its store)
    cannot answer now: UNAVAILABLE, DEADLINE_EXCEEDED, no connection."""
    return isinstance(error, StoreUnavailableError)


class ServerLink:
    """Up or down, judged from the calls that ended.

    A call only counts if it started after the last transition: a call sent before the
    outage that succeeds late proves nothing about now, nor does a call sent during the
    outage that fails just after the server came back (it would log a second outage).
    """

    def __init__(self, worker_id: str) -> None:
        self._worker_id = worker_id
        self._down_since: float | None = None
        self._changed_at = float("-inf")
        self._failed_calls = 0

    @property
    def is_down(self) -> bool:
        return self._down_since is not None

    def observe(self, started: float, error: DurableRpcError | None) -> None:
        """Record how a call started at ``started`` (time.monotonic()) ended: ``error``
        None when it succeeded. Any answer that is not transient (even LEASE_LOST) means
        the server answered."""
        transient = error is not None and is_transient(error)
        if self._down_since is not None and transient:
            self._failed_calls += 1
        if started < self._changed_at:
            return
        now = time.monotonic()
        if transient and self._down_since is None:
            self._down_since = self._changed_at = now
            self._failed_calls = 1
            log.warning(
                "worker %s lost the server (%s); polls, heartbeats and reports retry "
                "until it is back",
                self._worker_id,
                error,
            )
        elif not transient and self._down_since is not None:
            outage_s = now - self._down_since
            self._down_since = None
            self._changed_at = now
            log.warning(
                "worker %s: the server is back after %.1f s (%d calls failed meanwhile)",
                self._worker_id,
                outage_s,
                self._failed_calls,
            )
