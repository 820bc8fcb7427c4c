"""The one WARNING line a failed task attempt gets, written once the server answered the
report: its answer says when (and whether) the task is tried again.

Only text goes into the record, never the exception: a handler that keeps records (a
test's caplog, a memory buffer) would otherwise keep the failed attempt's frames alive.
"""

from __future__ import annotations

import logging

from durable_rpc.v1 import payload_pb2, service_pb2

log = logging.getLogger("durable_rpc.worker")


def _retry(
    response: service_pb2.FailActivityTaskResponse | service_pb2.FailWorkflowTaskResponse,
) -> str:
    if not response.HasField("retry_delay"):
        return ""
    return f"retry in {response.retry_delay.ToMilliseconds() / 1000:g} s"


def log_failed_attempt(
    task: service_pb2.PollActivityTaskResponse,
    failure: payload_pb2.Failure,
    response: service_pb2.FailActivityTaskResponse,
) -> None:
    """An activity attempt failed and the server recorded it."""
    retry = _retry(response) or (
        "not retried (non-retryable)" if failure.non_retryable else "not retried"
    )
    log.warning(
        "activity %s of workflow %s (run %s) attempt %d failed: %s: %s; %s",
        task.activity_type,
        task.workflow_id,
        task.run_id,
        task.attempt,
        failure.type,
        failure.message,
        retry,
    )


def log_failed_workflow_task(
    task: service_pb2.PollWorkflowTaskResponse,
    error: BaseException,
    response: service_pb2.FailWorkflowTaskResponse,
) -> None:
    """A workflow task failed (the run stays open) and the server recorded it."""
    log.warning(
        "workflow task of %s (%s, run %s) attempt %d failed: %s: %s; %s",
        task.workflow_id,
        task.workflow_type,
        task.run_id,
        task.attempt,
        type(error).__name__,
        str(error),
        _retry(response) or "retried after a backoff",
    )
