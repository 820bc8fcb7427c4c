"""Errors workflow code sees, and the task-level error the runtime raises."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durable_rpc.activity._errors import ApplicationError


class ActivityError(Exception):
    """An activity failed for good (retries exhausted or non-retryable).

    ``cause`` is the activity's failure as an :class:`ApplicationError` (its ``type`` is
    the exception class name, or the ``type`` the activity gave its ApplicationError).
    """

    failure_type = "ActivityError"

    def __init__(
        self, message: str, *, seq: int, activity_type: str, attempt: int, cause: ApplicationError
    ) -> None:
        super().__init__(message)
        self.message = message
        self.seq = seq
        self.activity_type = activity_type
        self.attempt = attempt
        self.cause = cause
        self.__cause__ = cause


class AmbiguousEffectError(ActivityError):
    """A non-idempotent activity's attempt lost its lease with no outcome.

    The effect may or may not have happened, so it was not retried (it *fails closed*).
    Reconcile using ``seq`` / ``attempt`` (and the attempt's fencing token, which the
    activity saw as ``activity.info().fencing_token``); ``details`` holds the failure's
    structured details, if any.
    """

    failure_type = "AmbiguousEffectError"

    def __init__(
        self,
        message: str,
        *,
        seq: int,
        activity_type: str,
        attempt: int,
        cause: ApplicationError,
        details: Sequence[Any] = (),
    ) -> None:
        super().__init__(
            message, seq=seq, activity_type=activity_type, attempt=attempt, cause=cause
        )
        self.details = details


class WorkflowTaskError(Exception):
    """The workflow *task* cannot be completed: fail the task, never the workflow.

    Raised for a runtime invariant violation, code that uses a forbidden operation
    (real timers or I/O), or code that keeps running past the task deadline. The run
    stays open; a fixed deployment (or a retry) picks the task up again.
    """


class RestrictedOperationError(RuntimeError):
    """Workflow code called something that is not deterministic (``asyncio.sleep``...)."""


class ContinueAsNewError(BaseException):
    """Raised by ``workflow.continue_as_new()``: ends the run as continued_as_new and
    starts a fresh run with ``args``, of the same workflow unless ``workflow_type`` (and
    ``workflow_version``) or ``task_queue`` route it elsewhere ("" = this run's). A
    BaseException so ``except Exception`` in workflow code does not swallow it."""

    def __init__(
        self,
        args: tuple[object, ...],
        *,
        task_queue: str = "",
        workflow_type: str = "",
        workflow_version: str = "",
    ) -> None:
        super().__init__("continue as new")
        self.new_args = args
        self.task_queue = task_queue
        self.workflow_type = workflow_type
        self.workflow_version = workflow_version
