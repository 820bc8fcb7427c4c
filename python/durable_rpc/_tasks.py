"""Background tasks that always end when told to.

On Python 3.11, ``asyncio.wait_for`` returns the awaited result and drops a cancellation
that arrives just as the awaited call finishes, so a loop cancelled once at that moment
keeps looping and whoever awaits it waits forever. Background loops therefore wait with
:func:`wait_event` (``asyncio.timeout``, which never drops a cancellation), check a stop
event on every turn, and are ended with :func:`stop_task`, which cancels until the task is
done and gives up at a deadline rather than hang a shutdown.
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("durable_rpc.tasks")

#: How long a loop's ``stop()`` waits for it unless told (a server passes what is left of
#: its grace period).
STOP_TIMEOUT_S = 5.0
#: How often :func:`stop_task` cancels again a task that has not ended yet.
RECANCEL_S = 0.05


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait at most ``timeout`` seconds for ``event``; True if it is set."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        pass
    return event.is_set()


async def stop_task(task: asyncio.Task[None] | None, timeout: float) -> bool:
    """Cancel ``task`` (again and again: one cancellation may be lost) until it is done,
    at most ``timeout`` seconds; True once it has ended. A task still running then is
    logged and left behind: a shutdown must finish."""
    if task is None:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, timeout)
    while not task.done():
        task.cancel()
        left = deadline - loop.time()
        if left <= 0:
            log.error("background task %s did not stop; shutting down without it", task)
            return False
        await asyncio.wait({task}, timeout=min(RECANCEL_S, left))
    if not task.cancelled() and task.exception() is not None:
        log.error("background task %s failed", task, exc_info=task.exception())
    return True
