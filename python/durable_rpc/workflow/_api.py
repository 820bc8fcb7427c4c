"""The functions workflow code calls; each finds its runtime through the running loop."""

from __future__ import annotations

import asyncio
import random as _random
import typing
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar, overload

from durable_rpc import converter
from durable_rpc.activity._definition import check_rate_limit_key, must_define
from durable_rpc.sessions import SessionOptions
from durable_rpc.v1 import options_pb2
from durable_rpc.workflow._cancellation import CancellationPolicy, check_policy
from durable_rpc.workflow._errors import ContinueAsNewError
from durable_rpc.workflow._loop import WorkflowLoop
from durable_rpc.workflow._markers import DEFAULT_VERSION as DEFAULT_VERSION
from durable_rpc.workflow._members import group_session
from durable_rpc.workflow._retry import RetryPolicy, duration
from durable_rpc.workflow._runtime import LocalActivityRequest, WorkflowInfo, WorkflowInstance

_R = TypeVar("_R")


def current() -> WorkflowInstance:
    """The runtime of the workflow whose code is running now."""
    loop = asyncio._get_running_loop()
    if isinstance(loop, WorkflowLoop) and isinstance(loop.owner, WorkflowInstance):
        return loop.owner
    raise RuntimeError("not running inside workflow code")


def in_workflow() -> bool:
    loop = asyncio._get_running_loop()
    return isinstance(loop, WorkflowLoop)


def info() -> WorkflowInfo:
    """workflow_id, run_id, type, version, task queue and whether this is a replay."""
    return current().current_info()


def continue_as_new(
    *args: Any,
    task_queue: str | None = None,
    workflow: Callable[..., Any] | str | None = None,
) -> NoReturn:
    """End this run and start a fresh one of the same workflow with ``args``.

    The new run keeps the workflow id, type, version, task queue, memo and search
    attributes and starts with an empty history (so an unbounded loop stays cheap to
    replay); ``handle.result()`` follows the chain to the final run. ``task_queue``
    sends the new run to another task queue, ``workflow`` (``Other.run`` or a type
    name) makes it a run of another workflow type (and that definition's version; "1"
    for a name); both are recorded in the history. Raises ContinueAsNewError (a
    BaseException): do not catch it.
    """
    current()
    if task_queue is not None and not task_queue:
        raise ValueError("task_queue must not be empty (None keeps this run's)")
    workflow_type = workflow_version = ""
    if workflow is not None:
        if isinstance(workflow, str) and not workflow:
            raise ValueError("workflow must not be empty (None keeps this run's)")
        from durable_rpc.client._refs import workflow_ref

        workflow_type, workflow_version, _ = workflow_ref(workflow)
    raise ContinueAsNewError(
        tuple(args),
        task_queue=task_queue or "",
        workflow_type=workflow_type,
        workflow_version=workflow_version,
    )


def upsert_search_attributes(values: Mapping[str, Any]) -> None:
    """Add or replace search attributes of this run (typed like at start: str keyword,
    ``Text`` text, int, float double, bool, datetime). Recorded in history as a command,
    so replay checks it; ``info().search_attributes`` shows the new values at once."""
    current().upsert_search_attributes(values)


def upsert_memo(values: Mapping[str, Any]) -> None:
    """Merge ``values`` into this run's memo: each key is added or replaced, a key set
    to None is removed. Recorded in history as a command (replay checks the keys and
    values); ``info().memo`` shows the merged memo at once, describe and list once the
    workflow task completed."""
    current().upsert_memo(values)


def now() -> datetime:
    """The workflow clock (tz-aware UTC): the recorded time of the current workflow task,
    identical on every replay."""
    return current().now


def random() -> _random.Random:
    """A Random seeded from the run id; draws are identical on every replay."""
    return current().random


def uuid4() -> uuid.UUID:
    """A version-4 UUID drawn from :func:`random`, so it replays identically."""
    return uuid.UUID(int=current().random.getrandbits(128), version=4)


def _return_hint(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return", Any)
    except Exception:
        # Builtins, partials, unresolvable forward references: plain values.
        return Any


@overload
def side_effect(fn: Callable[[], Any], *, result_type: type[_R]) -> _R: ...
@overload
def side_effect(fn: Callable[[], _R], *, result_type: None = None) -> _R: ...
def side_effect(fn: Callable[[], Any], *, result_type: Any = None) -> Any:
    """Call the synchronous ``fn`` once and record its value in history; on replay,
    return the recorded value without calling ``fn``.

    For small non-deterministic values (an id from a local generator, a config read);
    anything slow, fallible or with effects belongs in an activity. The value goes
    through the converter (typed by ``result_type`` or ``fn``'s return hint), and the
    decoded value is returned on the first execution too, so both paths agree. If
    ``fn`` raises, nothing is recorded and the workflow *task* fails (it is retried).
    A side effect takes a seq like any other command.
    """
    hint = result_type if result_type is not None else _return_hint(fn)
    return current().side_effect(fn, hint)


def patched(change_id: str) -> bool:
    """Version a change to workflow code: True when this run takes the new code path.

    A run executing this call live records a patch marker for ``change_id`` and gets
    True; replaying a history recorded before the change (no marker for ``change_id``)
    gets False, so it keeps following the old branch. The first answer holds for the
    rest of the run. Patch markers take no seq: adding a ``patched()`` call does not
    shift the commands after it in old histories::

        if workflow.patched("charge-v2"):
            await workflow.execute_activity(charge_v2, ...)
        else:
            await workflow.execute_activity(charge, ...)

    Once no open run can take the old branch, replace the call with
    :func:`deprecate_patch` and delete the old branch.
    """
    return current().patch(change_id)


def deprecate_patch(change_id: str) -> None:
    """Mark ``change_id``'s patch as the only code path. New runs still record the
    marker, so they replay on code that calls ``patched(change_id)``; histories with or
    without the marker both replay. Once no history with ``patched()``-era runs matters,
    delete the call (recorded markers the code no longer produces are skipped)."""
    current().patch(change_id)


def get_version(change_id: str, min_supported: int, max_supported: int) -> int:
    """Version a change to workflow code by number: the version of ``change_id`` this
    run follows, between ``min_supported`` and ``max_supported``.

    A run executing this call live records a version marker holding ``max_supported``
    and gets it; replaying a history recorded before the call (no marker for
    ``change_id``) gets :data:`DEFAULT_VERSION` (-1); a recorded run gets its recorded
    version. The first answer holds for the rest of the run, and the marker takes no
    seq (adding the call does not shift later commands)::

        version = workflow.get_version("ship", workflow.DEFAULT_VERSION, 2)
        if version == workflow.DEFAULT_VERSION:
            ...  # the code before the change
        elif version == 1:
            ...
        else:
            ...

    Raise ``max_supported`` for the next change; raise ``min_supported`` once no open run
    is below it. A recorded version outside the range fails the workflow *task* with a
    :class:`NondeterminismError` naming the change id, the version and the range. Once
    every open run is at one version, the call can be deleted (recorded version markers
    the code no longer produces are skipped, like deprecated patches).
    """
    return current().get_version(change_id, min_supported, max_supported)


async def sleep(delay: float | timedelta) -> None:
    """A durable timer: survives worker restarts; cancelling the awaiting task cancels it."""
    span = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)
    if span < timedelta(0):
        raise ValueError("sleep duration must not be negative")
    if span == timedelta(0):
        # No timer for a zero delay, just a yield (deterministic all the same).
        await asyncio.sleep(0)
        return
    runtime = current()
    pb = duration(span)
    seq, future = runtime.start_timer((pb.seconds, pb.nanos))
    try:
        await future
    except asyncio.CancelledError:
        runtime.cancel_timer(seq)
        raise


async def execute_local_activity(
    activity: Callable[..., Any],
    *args: Any,
    start_to_close_timeout: timedelta | float | None = None,
    retry_policy: RetryPolicy | None = None,
    result_type: Any = None,
    schedule_to_close_timeout: timedelta | float | None = None,
    heartbeat_timeout: timedelta | float | None = None,
) -> Any:
    """Run ``activity`` inside the workflow worker, during the workflow task (not
    through the server's activity queue), and return its result (typed from its return
    hint, or ``result_type``); ActivityError when it fails for good.

    Attempts run one after another under ``start_to_close_timeout`` each (bounded by
    the workflow task's deadline) and ``retry_policy`` (default: 3 attempts), with the
    backoff slept locally. ``schedule_to_close_timeout`` bounds all attempts together
    (backoffs included): an attempt still running then fails with
    LocalActivityTimeoutError and none follows. ``heartbeat_timeout`` fails an attempt
    that goes that long without calling ``activity.heartbeat()`` (``activity.info()``
    works too); it is retried like any failure. The result or final failure is
    recorded in history (a ``local_activity`` marker, with every attempt's outcome in
    its details) with the workflow task's completion; once recorded it is never run
    again: replay returns the recorded outcome. Until then it is *at least once*: a
    worker that dies before the workflow task completes runs it again with the retried
    task. Keep local activities short and idempotent.
    """
    runtime = current()
    definition = must_define(activity)
    hint = result_type if result_type is not None else definition.result_hint
    timeout = (
        start_to_close_timeout.total_seconds()
        if isinstance(start_to_close_timeout, timedelta)
        else start_to_close_timeout
    )
    if timeout is not None and timeout <= 0:
        raise ValueError("start_to_close_timeout must be positive")
    bounds = {
        name: _positive_seconds(name, value)
        for name, value in (
            ("schedule_to_close_timeout", schedule_to_close_timeout),
            ("heartbeat_timeout", heartbeat_timeout),
        )
    }
    info = runtime.current_info()

    def request(seq: int) -> LocalActivityRequest:
        return LocalActivityRequest(
            seq=seq,
            name=definition.name,
            fn=activity,
            args=tuple(args),
            start_to_close_timeout=timeout,
            retry_policy=retry_policy,
            schedule_to_close_timeout=bounds["schedule_to_close_timeout"],
            heartbeat_timeout=bounds["heartbeat_timeout"],
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            task_queue=info.task_queue,
        )

    return await runtime.schedule_local_activity(request, hint)


def _positive_seconds(name: str, value: timedelta | float | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise ValueError(f"{name} must be positive")
    return seconds


async def select(*awaitables: Awaitable[Any]) -> Any:
    """Run ``awaitables`` (activities, timers, child coroutines) concurrently and return
    the result of the first to finish (raising its error when it failed); the others
    are cancelled.

    Deterministic: the awaitables become tasks in argument order, and when several
    finish in the same activation the earliest argument wins. Cancelling a loser is
    safe: only losers that have not finished are cancelled (an activity without an
    outcome gets a RequestCancelActivity, a timer a CancelTimer); a loser that already
    finished keeps its result, and an activity attempt that completes despite the
    request records its result (cancellation never undoes a completed external write).
    Losers are not awaited: a running activity may take until its next heartbeat to
    stop, and the winner should not wait for that.
    """
    if not awaitables:
        raise ValueError("select() needs at least one awaitable")
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        for task in tasks:
            task.cancel()
        raise
    winner = next(task for task in tasks if task.done())
    for task in tasks:
        if not task.done():
            task.cancel()
        elif task is not winner and not task.cancelled():
            task.exception()  # retrieved: a finished loser's error is not "never retrieved"
    return winner.result()


async def wait_condition(
    predicate: Callable[[], bool], *, timeout: float | timedelta | None = None
) -> None:
    """Wait until ``predicate()`` is true; it is re-checked whenever the workflow's
    coroutines are all blocked (for example after a signal handler ran).

    With ``timeout``, a durable timer bounds the wait: TimeoutError when it fires first;
    the timer is cancelled (a recorded TimerCancelled) when the condition wins. A
    condition that is already true at expiry wins: the caller asked for the condition.
    """
    if predicate():
        return
    runtime = current()
    condition = runtime.wait_condition(predicate)
    if timeout is None:
        await condition
        return
    span = timeout if isinstance(timeout, timedelta) else timedelta(seconds=timeout)
    if span <= timedelta(0):
        condition.cancel()
        raise TimeoutError("wait_condition timed out")
    pb = duration(span)
    seq, timer = runtime.start_timer((pb.seconds, pb.nanos))
    try:
        await asyncio.wait({condition, timer}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        condition.cancel()
        runtime.cancel_timer(seq)
        raise
    if condition.done() or predicate():
        runtime.cancel_timer(seq)  # a no-op when the timer already fired
        if condition.done() and not condition.cancelled():
            condition.result()  # re-raises what the predicate raised
        condition.cancel()
        return
    condition.cancel()
    raise TimeoutError(f"wait_condition timed out after {span}")


def set_signal_handler(name: str, handler: Callable[..., Any] | None) -> None:
    """Register (or with None, remove) a handler at runtime; signals that arrived for
    ``name`` earlier are delivered to it now, in arrival order."""
    current().set_signal_handler(name, handler)


def _activity_options(
    start_to_close_timeout: timedelta | None,
    schedule_to_close_timeout: timedelta | None,
    schedule_to_start_timeout: timedelta | None,
    heartbeat_timeout: timedelta | None,
    retry_policy: RetryPolicy | None,
    idempotent: bool,
) -> options_pb2.ActivityOptions:
    if start_to_close_timeout is None and schedule_to_close_timeout is None:
        raise ValueError(
            "execute_activity needs start_to_close_timeout or schedule_to_close_timeout"
        )
    options = options_pb2.ActivityOptions(non_idempotent=not idempotent)
    if start_to_close_timeout is not None:
        options.start_to_close_timeout.CopyFrom(duration(start_to_close_timeout))
    if schedule_to_close_timeout is not None:
        options.schedule_to_close_timeout.CopyFrom(duration(schedule_to_close_timeout))
    if schedule_to_start_timeout is not None:
        options.schedule_to_start_timeout.CopyFrom(duration(schedule_to_start_timeout))
    if heartbeat_timeout is not None:
        options.heartbeat_timeout.CopyFrom(duration(heartbeat_timeout))
    if retry_policy is not None:
        options.retry_policy.CopyFrom(retry_policy.to_proto())
    return options


@overload
async def execute_activity(
    activity: Callable[..., Awaitable[_R]],
    *args: Any,
    start_to_close_timeout: timedelta | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    idempotent: bool = True,
    task_queue: str | None = None,
    rate_limit_key: str | None = None,
    priority: int | None = None,
    session: SessionOptions | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.TRY_CANCEL,
    result_type: type[_R] | None = None,
) -> _R: ...
@overload
async def execute_activity(
    activity: Callable[..., _R],
    *args: Any,
    start_to_close_timeout: timedelta | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    idempotent: bool = True,
    task_queue: str | None = None,
    rate_limit_key: str | None = None,
    priority: int | None = None,
    session: SessionOptions | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.TRY_CANCEL,
    result_type: type[_R] | None = None,
) -> _R: ...
@overload
async def execute_activity(
    activity: str,
    *args: Any,
    start_to_close_timeout: timedelta | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    idempotent: bool = True,
    task_queue: str | None = None,
    rate_limit_key: str | None = None,
    priority: int | None = None,
    session: SessionOptions | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.TRY_CANCEL,
    result_type: type[_R],
) -> _R: ...
@overload
async def execute_activity(
    activity: str,
    *args: Any,
    start_to_close_timeout: timedelta | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    idempotent: bool = True,
    task_queue: str | None = None,
    rate_limit_key: str | None = None,
    priority: int | None = None,
    session: SessionOptions | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.TRY_CANCEL,
    result_type: None = None,
) -> Any: ...
async def execute_activity(
    activity: Callable[..., Any] | str,
    *args: Any,
    start_to_close_timeout: timedelta | None = None,
    schedule_to_close_timeout: timedelta | None = None,
    schedule_to_start_timeout: timedelta | None = None,
    heartbeat_timeout: timedelta | None = None,
    retry_policy: RetryPolicy | None = None,
    idempotent: bool = True,
    task_queue: str | None = None,
    rate_limit_key: str | None = None,
    priority: int | None = None,
    session: SessionOptions | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.TRY_CANCEL,
    result_type: Any = None,
) -> Any:
    """Schedule an activity and wait for its result (typed from the function's return
    hint, or ``result_type``). Raises ActivityError when it fails for good, and
    AmbiguousEffectError when a non-idempotent attempt's outcome is unknown.

    ``idempotent=False`` makes the activity fail closed: an attempt whose lease expires
    with no outcome is never re-run.

    ``rate_limit_key`` names the downstream whose rate limit the attempts take a token
    from; by function reference it defaults to ``@activity.defn(rate_limit_key=...)``.
    By name with no key, only a rate limit on the activity type applies.

    ``priority`` (1 most urgent .. 5) orders the attempts' claims; None: the run's.

    ``session`` routes the activity to the worker holding that worker session
    (:mod:`durable_rpc.sessions`): only a worker with ``worker_sessions=True`` and the
    capabilities it requires runs it; the first such claim creates the session.

    ``cancellation`` is what cancelling this await (the run's cancellation, a
    ``workflow.select`` loser, ``task.cancel()``) does with the activity: TRY_CANCEL
    asks it to stop and raises CancelledError at once, WAIT_CANCELLATION_COMPLETED asks
    and waits for its outcome, ABANDON asks nothing and raises at once.
    """
    runtime = current()
    check_policy(cancellation)
    key = check_rate_limit_key(rate_limit_key)
    if isinstance(activity, str):
        activity_type, hint = activity, Any
    else:
        # Undecorated functions work too: named after the function, typed by its hints.
        definition = must_define(activity)
        activity_type, hint = definition.name, definition.result_hint
        if key is None:
            key = definition.rate_limit_key
    options = _activity_options(
        start_to_close_timeout,
        schedule_to_close_timeout,
        schedule_to_start_timeout,
        heartbeat_timeout,
        retry_policy,
        idempotent,
    )
    if key is not None:
        options.rate_limit_key = key
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 5:
            raise ValueError(f"priority must be an int from 1 (most urgent) to 5: {priority!r}")
        options.priority = priority
    if session is None:
        # A parallel group's session (workflow.parallel(..., session=...)) is its
        # leaves' default.
        session = group_session()
    if session is not None:
        if not isinstance(session, SessionOptions):
            raise TypeError(f"session must be a SessionOptions, got {session!r}")
        options.session.CopyFrom(session.to_proto())
    seq, future = runtime.schedule_activity(
        activity_type,
        converter.encode_args(args),
        task_queue=task_queue or "",
        options=options,
        result_hint=result_type if result_type is not None else hint,
    )
    try:
        return await future
    except asyncio.CancelledError:
        if future.done() and not future.cancelled() and future.exception() is None:
            # Resolved before the cancellation reached this code: it keeps its result.
            return future.result()
        if cancellation is CancellationPolicy.ABANDON:
            runtime.abandon_activity(seq)
            raise
        outcome = runtime.request_cancel_activity(seq)
        if outcome is None:
            raise
        if cancellation is CancellationPolicy.TRY_CANCEL:
            # Asked (the command is emitted); its outcome is not waited for: dropped.
            runtime.abandon_activity(seq)
            raise
    # Cancellation requested (recorded as RequestCancelActivity): wait for the outcome.
    # ActivityCancelled raises CancelledError here; an attempt that completed anyway
    # returns its result (cancellation never undoes a completed external write).
    try:
        return await outcome
    except asyncio.CancelledError:
        if outcome.cancelled():
            # Cancelled again while waiting: stop waiting; the outcome is dropped.
            runtime.abandon_activity(seq)
        raise
