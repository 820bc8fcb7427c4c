"""The error users raise to fail an activity (or a workflow) with a chosen type."""

from __future__ import annotations

from durable_rpc.v1 import payload_pb2


class ApplicationError(Exception):
    """A failure with a stable ``type`` that retry policies and callers can match on.

    Raise it from activity or workflow code. ``type`` defaults to ``"ApplicationError"``;
    ``non_retryable=True`` stops retries whatever the retry policy says. When the error
    was rebuilt from a recorded :class:`~durable_rpc.v1.payload_pb2.Failure` (for example
    as the cause of an ``ActivityError``), ``stack_trace`` holds the remote stack.
    """

    def __init__(
        self,
        message: str,
        type: str | None = None,
        non_retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.type = type or "ApplicationError"
        self.non_retryable = non_retryable
        self.stack_trace = ""
        self.failure: payload_pb2.Failure | None = None

    def __repr__(self) -> str:
        return (
            f"ApplicationError({self.message!r}, type={self.type!r}, "
            f"non_retryable={self.non_retryable})"
        )
