"""Python exceptions <-> the ``Failure`` message recorded in history.

Shared by the workflow runtime (FailWorkflow, activity failures seen by workflow code)
and the worker (FailActivityTask, FailWorkflowTask), so a failure looks the same
wherever it was raised.
"""

from __future__ import annotations

import traceback

from durable_rpc.activity._errors import ApplicationError
from durable_rpc.v1 import payload_pb2

# Deep cause chains are cut here: a Failure is for humans and retry policies, and an
# unbounded chain could exceed the server's message size.
_MAX_CAUSE_DEPTH = 8


def failure_from_exception(exc: BaseException, *, _depth: int = 0) -> payload_pb2.Failure:
    """The Failure recording ``exc``: type, message, stack trace and cause chain."""
    if isinstance(exc, ApplicationError):
        failure = payload_pb2.Failure(
            type=exc.type, message=exc.message, non_retryable=exc.non_retryable
        )
    else:
        failure = payload_pb2.Failure(type=type(exc).__name__, message=str(exc))
    failure_type = getattr(exc, "failure_type", None)
    if isinstance(failure_type, str) and failure_type:
        # Engine errors (ActivityError, AmbiguousEffectError) name their own type.
        failure.type = failure_type
    remote = getattr(exc, "stack_trace", "")
    local = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    failure.stack_trace = remote if isinstance(remote, str) and remote else local
    cause = exc.__cause__
    if cause is not None and _depth < _MAX_CAUSE_DEPTH:
        failure.cause.CopyFrom(failure_from_exception(cause, _depth=_depth + 1))
    return failure


def application_error_from_failure(failure: payload_pb2.Failure) -> ApplicationError:
    """The ApplicationError a workflow sees for a recorded failure (with its cause chain)."""
    error = ApplicationError(failure.message, failure.type, failure.non_retryable)
    error.stack_trace = failure.stack_trace
    error.failure = failure
    if failure.HasField("cause"):
        error.__cause__ = application_error_from_failure(failure.cause)
    return error
