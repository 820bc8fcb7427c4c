"""How long a worker keeps trying to report a task's outcome the server could not take.

A report (an activity's completion or failure, a workflow task's) stays acceptable after
its lease expired, as long as nobody else claimed the task (the lease
protocol): dropping it early makes a finished effect run again. So a report that fails
for a transient reason (UNAVAILABLE, DEADLINE_EXCEEDED, a lost connection: the server or
its database is down) is retried with capped exponential backoff and jitter until the
server gives a definitive answer -- accepted, LEASE_LOST, NOT_FOUND, INVALID_ARGUMENT...

Except on shutdown: once the worker stops claiming, a report still failing gets
``grace`` more seconds, then is abandoned (logged) so the worker stops in bounded time.
The server then treats the attempt as one whose worker died: its lease expires, an
idempotent activity is retried, a non-idempotent one fails closed (AmbiguousEffectError),
a workflow task is simply decided again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

#: The first pause after a failed report, doubling up to the cap.
INITIAL_BACKOFF_S = 0.1
#: The longest pause: a report lands at most this long after the server is back.
MAX_BACKOFF_S = 5.0
#: How long a failing report keeps trying once the worker is shutting down.
DEFAULT_SHUTDOWN_GRACE_S = 10.0


class ReportBackoff:
    """The pauses between tries of one report; ``pause()`` is None when it is time to
    give up (only ever during shutdown)."""

    def __init__(
        self, shutting_down: Callable[[], bool], grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    ) -> None:
        self._shutting_down = shutting_down
        self._grace_s = grace_s
        self._next_s = INITIAL_BACKOFF_S
        self._max_s = MAX_BACKOFF_S
        self._give_up_at: float | None = None
        self.failures = 0

    def pause(self) -> float | None:
        """The pause before the next try, after one more failure."""
        self.failures += 1
        delay = self._next_s
        self._next_s = min(self._next_s * 2, self._max_s)
        # Jitter: reports that failed together (one outage) do not return in lockstep.
        delay = delay / 2 + random.uniform(0, delay / 2)
        if not self._shutting_down():
            return delay
        now = time.monotonic()
        if self._give_up_at is None:
            self._give_up_at = now + self._grace_s
        remaining = self._give_up_at - now
        if remaining <= 0:
            return None
        return min(delay, remaining)
