"""``workflow.start_child_workflow`` / ``workflow.execute_child_workflow``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar, overload

from durable_rpc.workflow._api import current
from durable_rpc.workflow._cancellation import CancellationPolicy, check_policy
from durable_rpc.workflow._children import (
    ChildStartOptions,
    ChildWorkflowError,
    ChildWorkflowHandle,
    ParentClosePolicy,
    start,
)
from durable_rpc.workflow._retry import RetryPolicy

_R = TypeVar("_R")


@overload
async def start_child_workflow(
    workflow: Callable[..., Awaitable[_R]],
    *args: Any,
    id: str | None = None,
    task_queue: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    result_type: type[_R] | None = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.ABANDON,
) -> ChildWorkflowHandle[_R]: ...
@overload
async def start_child_workflow(
    workflow: str,
    *args: Any,
    id: str | None = None,
    task_queue: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    result_type: Any = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.ABANDON,
) -> ChildWorkflowHandle[Any]: ...
async def start_child_workflow(
    workflow: Callable[..., Any] | str,
    *args: Any,
    id: str | None = None,
    task_queue: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    result_type: Any = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.ABANDON,
) -> ChildWorkflowHandle[Any]:
    """Start child workflow ``workflow`` (``Child.run`` or a type name) with ``args``
    and return its handle once the server started it (in the same transaction as this
    task's completion). ``id`` defaults to ``"<parent id>/child-<seq>"``; the task
    queue to the parent's. Raises ChildWorkflowStartError when it could not start
    (e.g. a run of ``id`` is open). When this run closes, ``parent_close_policy`` is
    applied to the child if it is still open. ``execution_timeout``, ``run_timeout``,
    ``memo`` and ``search_attributes`` are the child run's, as with a client's
    ``start_workflow``. ``retry_policy`` (the activities' RetryPolicy) retries a failed
    child run: the server starts a new run of the same child id after the backoff, and
    the handle's result is the last attempt's outcome.

    ``cancellation`` is what cancelling the wait for the start does with the child:
    ABANDON (the default) leaves it running (the parent-close policy still applies when
    this run closes), TRY_CANCEL and WAIT_CANCELLATION_COMPLETED ask it to cancel
    (RequestCancelChildWorkflow) and raise CancelledError at once. Cancelling an
    ``await handle`` never touches the child: ``handle.cancel()`` asks it."""
    instance = current()
    check_policy(cancellation)
    pending = start(
        instance,
        workflow,
        args,
        workflow_id=id,
        task_queue=task_queue,
        parent_close_policy=parent_close_policy,
        result_type=result_type,
        options=ChildStartOptions(
            execution_timeout, run_timeout, memo, search_attributes, retry_policy
        ),
    )
    handle: ChildWorkflowHandle[Any] = ChildWorkflowHandle(instance, pending)
    try:
        await pending.started
    except asyncio.CancelledError:
        if cancellation is not CancellationPolicy.ABANDON or instance._run_cancelled:
            handle.cancel()
        raise
    return handle


@overload
async def execute_child_workflow(
    workflow: Callable[..., Awaitable[_R]],
    *args: Any,
    id: str | None = None,
    task_queue: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    result_type: type[_R] | None = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.ABANDON,
) -> _R: ...
@overload
async def execute_child_workflow(
    workflow: str,
    *args: Any,
    id: str | None = None,
    task_queue: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    result_type: Any = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.ABANDON,
) -> Any: ...
async def execute_child_workflow(
    workflow: Callable[..., Any] | str,
    *args: Any,
    id: str | None = None,
    task_queue: str | None = None,
    parent_close_policy: ParentClosePolicy = ParentClosePolicy.TERMINATE,
    result_type: Any = None,
    execution_timeout: timedelta | None = None,
    run_timeout: timedelta | None = None,
    memo: Mapping[str, Any] | None = None,
    search_attributes: Mapping[str, Any] | None = None,
    retry_policy: RetryPolicy | None = None,
    cancellation: CancellationPolicy = CancellationPolicy.ABANDON,
) -> Any:
    """Start a child workflow and wait for its result (typed from the run method's
    return hint, or ``result_type``). Raises ChildWorkflowStartError when it could not
    start and ChildWorkflowError (the child's failure as cause) when it failed, was
    cancelled, terminated or timed out.

    ``cancellation`` is what cancelling the awaiting coroutine does with the child:
    ABANDON (the default) leaves it running (the parent-close policy still applies when
    this run closes), TRY_CANCEL asks it to cancel (RequestCancelChildWorkflow, the child
    gets CancelRequested) and raises CancelledError at once, WAIT_CANCELLATION_COMPLETED
    asks and waits until the child closed: its result if it completed anyway, else
    CancelledError."""
    handle = await start_child_workflow(
        workflow,
        *args,
        id=id,
        task_queue=task_queue,
        parent_close_policy=parent_close_policy,
        result_type=result_type,
        execution_timeout=execution_timeout,
        run_timeout=run_timeout,
        memo=memo,
        search_attributes=search_attributes,
        retry_policy=retry_policy,
        cancellation=cancellation,
    )
    try:
        return await handle.result()
    except asyncio.CancelledError:
        # A run cancelled by a request recorded before cooperative cancellation replays
        # what its code did then: it asked the child to cancel.
        if cancellation is CancellationPolicy.ABANDON and not current()._run_cancelled:
            raise
        handle.cancel()
        if cancellation is CancellationPolicy.TRY_CANCEL:
            raise
    # WAIT_CANCELLATION_COMPLETED: the child's close, which a second cancellation of this
    # coroutine stops waiting for.
    try:
        return await handle.result()
    except ChildWorkflowError as error:
        raise asyncio.CancelledError(f"child workflow {handle.id!r} {error.status}") from error
