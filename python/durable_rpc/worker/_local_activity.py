"""Local activities: run inside the workflow task's thread, outcome recorded as a
``local_activity`` marker with the task's completion (see docs/engine.md).

Each attempt runs in a daemon thread under an activity context, so ``activity.info()``
and ``activity.heartbeat()`` work; the workflow task's thread waits on a condition that
a heartbeat or the attempt's end notifies, bounded by the attempt's start_to_close, the
heartbeat timeout, the schedule_to_close deadline of all attempts and the workflow
task's deadline. Every attempt's outcome goes into the marker's details."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any

from durable_rpc import converter
from durable_rpc.activity._context import ActivityContext, ActivityInfo, set_context
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
    """An attempt ran past its start_to_close, heartbeat or schedule_to_close timeout
    (or the workflow task deadline)."""


class _AttemptContext(ActivityContext):
    """A local attempt's activity context: each ``activity.heartbeat()`` (which counts
    ``beats``) stamps the time and wakes the waiting workflow task thread."""

    def __init__(self, info: ActivityInfo, changed: threading.Condition) -> None:
        self._changed = changed
        self._beats = 0
        self.last_beat = time.monotonic()
        super().__init__(info)

    @property
    def beats(self) -> int:
        return self._beats

    @beats.setter
    def beats(self, value: int) -> None:
        with self._changed:
            self._beats = value
            self.last_beat = time.monotonic()
            self._changed.notify_all()


class _Attempt:
    """One attempt running in its own daemon thread (left behind if it times out: a
    sync function cannot be interrupted; an async one is cancelled)."""

    def __init__(self, request: LocalActivityRequest, attempt: int) -> None:
        self.changed = threading.Condition()
        info = ActivityInfo(
            task_id=0,
            attempt=attempt,
            fencing_token=0,
            workflow_id=request.workflow_id,
            run_id=request.run_id,
            activity_type=request.name,
            seq=request.seq,
            task_queue=request.task_queue,
            heartbeat_details=(),
        )
        self.context = _AttemptContext(info, self.changed)
        self.request = request
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        threading.Thread(
            target=self._run, name=f"local-activity-{request.name}", daemon=True
        ).start()

    def _run(self) -> None:
        set_context(self.context)
        fn = self.request.fn
        try:
            if inspect.iscoroutinefunction(fn):
                self.value = asyncio.run(self._run_async())
            else:
                self.value = fn(*self.request.args)
        except BaseException as exc:  # handed to the waiting thread
            self.error = exc
        with self.changed:
            self.done = True
            self.changed.notify_all()

    async def _run_async(self) -> Any:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        return await self.request.fn(*self.request.args)

    def wait(self, end: float | None, heartbeat_timeout: float | None) -> str | None:
        """Waits for the attempt to end; returns None, or which bound it ran past
        ("end" or "heartbeat"), having asked it to stop."""
        with self.changed:
            while not self.done:
                now = time.monotonic()
                beat_end = (
                    None
                    if heartbeat_timeout is None
                    else self.context.last_beat + heartbeat_timeout
                )
                if end is not None and now >= end:
                    return self._abandon("end")
                if beat_end is not None and now >= beat_end:
                    return self._abandon("heartbeat")
                bounds = [b for b in (end, beat_end) if b is not None]
                self.changed.wait(min(bounds) - now if bounds else None)
        return None

    def _abandon(self, why: str) -> str:
        # heartbeat() raises CancelledError from now on; an async attempt is cancelled.
        self.context.cancelled.set()
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        return why


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


def _earliest(*values: float | None) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def run_local_activity(
    request: LocalActivityRequest, deadline: float | None
) -> LocalActivityOutcome:
    """Run the attempts of ``request`` (sleeping the backoff in this thread) until one
    succeeds or it fails for good; never past ``deadline`` (time.monotonic, the
    workflow task's) nor its schedule_to_close timeout."""
    policy = request.retry_policy
    if not isinstance(policy, RetryPolicy):
        policy = RetryPolicy(maximum_attempts=DEFAULT_MAXIMUM_ATTEMPTS)
    started = time.monotonic()
    schedule_end = (
        None
        if request.schedule_to_close_timeout is None
        else started + request.schedule_to_close_timeout
    )
    log: list[dict[str, Any]] = []
    attempt = 1
    while True:
        attempt_start = time.monotonic()
        attempt_end = _earliest(
            None
            if request.start_to_close_timeout is None
            else attempt_start + request.start_to_close_timeout,
            schedule_end,
            deadline,
        )
        running = _Attempt(request, attempt)
        ran_past = running.wait(attempt_end, request.heartbeat_timeout)
        final = False
        if ran_past is None and running.error is None:
            log.append(_entry(attempt, "completed", attempt_start))
            return LocalActivityOutcome(
                request.seq, "", converter.encode(running.value), _encoded(log)
            )
        if ran_past is None:
            error = running.error
            assert error is not None
            if not isinstance(error, Exception):
                raise error  # KeyboardInterrupt, SystemExit: not the activity's failure
            outcome = "failed"
        else:
            error = _timeout(request, ran_past, attempt_end, schedule_end, deadline)
            # Past schedule_to_close (or the task deadline) no attempt may follow.
            final = ran_past == "end" and attempt_end in (schedule_end, deadline)
            outcome = "timed_out"
        failure = failure_from_exception(error)
        log.append(_entry(attempt, outcome, attempt_start, failure.type, failure.message))
        delay = (
            None if final or failure.non_retryable else _retry_delay(policy, attempt, failure.type)
        )
        limit = _earliest(schedule_end, deadline)
        if delay is not None and limit is not None and time.monotonic() + delay >= limit:
            delay = None
        if delay is None:
            data = converter.encode([failure.type, failure.message, attempt])
            return LocalActivityOutcome(request.seq, LOCAL_ACTIVITY_FAILED, data, _encoded(log))
        time.sleep(delay)
        attempt += 1


def _timeout(
    request: LocalActivityRequest,
    ran_past: str,
    attempt_end: float | None,
    schedule_end: float | None,
    deadline: float | None,
) -> LocalActivityTimeoutError:
    name = request.name
    if ran_past == "heartbeat":
        return LocalActivityTimeoutError(
            f"local activity {name!r} sent no heartbeat within its heartbeat timeout "
            f"({request.heartbeat_timeout}s)"
        )
    if attempt_end == schedule_end:
        return LocalActivityTimeoutError(
            f"local activity {name!r} passed its schedule_to_close timeout "
            f"({request.schedule_to_close_timeout}s)"
        )
    if attempt_end == deadline:
        return LocalActivityTimeoutError(
            f"local activity {name!r} ran into the workflow task deadline"
        )
    return LocalActivityTimeoutError(
        f"local activity {name!r} timed out after {request.start_to_close_timeout}s"
    )


def _entry(
    attempt: int, outcome: str, started: float, type_: str = "", message: str = ""
) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "outcome": outcome,
        "type": type_,
        "message": message,
        "duration_ms": round((time.monotonic() - started) * 1000),
    }


def _encoded(log: list[dict[str, Any]]) -> bytes:
    return converter.encode(log)
