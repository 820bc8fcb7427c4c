"""Local activities: run inside the workflow task's thread, outcome recorded as a
``local_activity`` marker with the task's completion (see docs/engine.md)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any

from durable_rpc import converter
from durable_rpc.activity._failure import failure_from_exception
from durable_rpc.workflow._retry import RetryPolicy
from durable_rpc.workflow._runtime import (
    LOCAL_ACTIVITY_FAILED,
    LocalActivityOutcome,
    LocalActivityRequest,
)

#: Attempts when no retry policy is given (local activities must stay short).
DEFAULT_MAXIMUM_ATTEMPTS = 3


class LocalActivityTimeoutError(Exception):
    """An attempt ran past its start_to_close timeout (or the workflow task deadline)."""


def _call(request: LocalActivityRequest, timeout: float | None) -> Any:
    fn = request.fn
    if inspect.iscoroutinefunction(fn):

        async def bounded() -> Any:
            return await asyncio.wait_for(fn(*request.args), timeout)

        try:
            return asyncio.run(bounded())
        except TimeoutError as exc:
            raise LocalActivityTimeoutError(
                f"local activity {request.name!r} timed out after {timeout}s"
            ) from exc
    if timeout is None:
        return fn(*request.args)
    # A sync function cannot be interrupted: it runs in a daemon thread and is left
    # behind when its attempt times out.
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*request.args)
        except BaseException as exc:  # handed to the attempt below
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"local-activity-{request.name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise LocalActivityTimeoutError(
            f"local activity {request.name!r} timed out after {timeout}s"
        )
    if "error" in box:
        raise box["error"]
    return box["value"]


def _retry_delay(policy: RetryPolicy, attempt: int, failure_type: str) -> float | None:
    """Seconds before attempt ``attempt + 1``, or None when there is none."""
    maximum = policy.maximum_attempts or 0
    if maximum and attempt >= maximum:
        return None
    if failure_type in policy.non_retryable_error_types:
        return None
    initial = policy.initial_interval.total_seconds() if policy.initial_interval else 1.0
    coefficient = policy.backoff_coefficient or 2.0
    cap = policy.maximum_interval.total_seconds() if policy.maximum_interval else 100 * initial
    return float(min(initial * coefficient ** (attempt - 1), cap))


def run_local_activity(
    request: LocalActivityRequest, deadline: float | None
) -> LocalActivityOutcome:
    """Run the attempts of ``request`` (sleeping the backoff in this thread) until one
    succeeds or it fails for good; never past ``deadline`` (time.monotonic)."""
    policy = request.retry_policy
    if not isinstance(policy, RetryPolicy):
        policy = RetryPolicy(maximum_attempts=DEFAULT_MAXIMUM_ATTEMPTS)
    attempt = 1
    while True:
        timeout = request.start_to_close_timeout
        if deadline is not None:
            left = max(deadline - time.monotonic(), 0.001)
            timeout = left if timeout is None else min(timeout, left)
        try:
            value = _call(request, timeout)
            return LocalActivityOutcome(request.seq, "", converter.encode(value))
        except Exception as exc:
            failure = failure_from_exception(exc)
            delay = None if failure.non_retryable else _retry_delay(policy, attempt, failure.type)
            if delay is not None and deadline is not None and time.monotonic() + delay >= deadline:
                delay = None
            if delay is None:
                data = converter.encode([failure.type, failure.message, attempt])
                return LocalActivityOutcome(request.seq, LOCAL_ACTIVITY_FAILED, data)
        time.sleep(delay)
        attempt += 1
