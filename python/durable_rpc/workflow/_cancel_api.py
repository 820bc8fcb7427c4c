"""``workflow.cancellation()`` and ``workflow.shield()``."""

from __future__ import annotations

from durable_rpc.workflow._api import current
from durable_rpc.workflow._cancellation import Shield
from durable_rpc.workflow._values import CancellationRequest


def cancellation() -> CancellationRequest | None:
    """The run's cancellation request (reason, requested_at, cleanup_deadline), or None
    while none was made. Read from history: the same on every replay. Set as soon as
    the request arrives, also while its delivery waits for a shield to close."""
    return current().cancellation_request


def shield() -> Shield:
    """A block the run's cancellation does not interrupt: ``with workflow.shield():``
    (or ``async with``). A request arriving while it runs is delivered when it exits
    (at the next await). What the block awaits -- activities, timers, children -- runs
    to completion, so cleanup after a cancellation goes in one::

        try:
            await workflow.execute_activity(reserve, ...)
        except asyncio.CancelledError:
            with workflow.shield():
                await workflow.execute_activity(release, ...)
            raise
    """
    return Shield(current())
