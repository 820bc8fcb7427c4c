"""Domain errors with stable reasons.

Every error that crosses the API is a :class:`DurableRpcError` with a stable ``reason``
(the google.rpc.ErrorInfo reason on the wire). The server maps each reason to one gRPC
status code in one table (:data:`STATUS_BY_REASON`); the client maps it back to the
same class, so callers catch the same exception on both sides of the wire.
"""

from __future__ import annotations

from typing import ClassVar

import grpc

ERROR_DOMAIN = "durable-rpc"


class DurableRpcError(Exception):
    """Base of every domain error; ``reason`` is stable and machine-readable."""

    reason: ClassVar[str] = "INTERNAL"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


class LeaseLostError(DurableRpcError):
    """The caller no longer owns the task: another claim, an older token, or expiry."""

    reason = "LEASE_LOST"


class WorkflowAlreadyStartedError(DurableRpcError):
    """An open run already uses this workflow id (started by another request)."""

    reason = "WORKFLOW_ALREADY_STARTED"


class NotFoundError(DurableRpcError):
    reason = "NOT_FOUND"


class InvalidArgumentError(DurableRpcError):
    reason = "INVALID_ARGUMENT"


class InvalidPayloadError(DurableRpcError):
    """A payload is not a valid Value frame (or an external reference does not verify)."""

    reason = "INVALID_PAYLOAD"


class DefinitionChangedError(DurableRpcError):
    """A different code fingerprint was registered under an existing (name, version)."""

    reason = "DEFINITION_CHANGED"


class NamespaceNotFoundError(DurableRpcError):
    reason = "NAMESPACE_NOT_FOUND"


class WorkflowNotRunningError(DurableRpcError):
    """The run is closed; signals, cancellation and termination no longer apply."""

    reason = "WORKFLOW_NOT_RUNNING"


class StoreUnavailableError(DurableRpcError):
    """The database cannot be reached; nothing was changed. Retry later."""

    reason = "UNAVAILABLE"


class ResourceExhaustedError(DurableRpcError):
    """A request is larger than the server accepts, or a limit was reached."""

    reason = "RESOURCE_EXHAUSTED"


class HistoryLimitExceededError(ResourceExhaustedError):
    """The run's history reached its hard limit (events or bytes): new input is refused,
    and a workflow task whose commands pass it fails the run. Continue-as-new before."""

    reason = "HISTORY_LIMIT_EXCEEDED"


class AdmissionLimitError(ResourceExhaustedError):
    """The namespace's admission policy (open runs, start rate) refuses a new start: its
    policy is to refuse, not to queue, over the limit. Retry later."""

    reason = "ADMISSION_LIMIT"


class ConcurrencyKeyLimitError(AdmissionLimitError):
    """The start's concurrency key has its namespace's limit of open runs and the key
    strategy is CANCEL_NEWEST: the new start is refused. Retry later."""

    reason = "CONCURRENCY_KEY_LIMIT"


class UnimplementedError(DurableRpcError):
    """The server does not implement this RPC (it is newer than the server)."""

    reason = "UNIMPLEMENTED"


class InternalError(DurableRpcError):
    reason = "INTERNAL"


class QueryFailedError(DurableRpcError):
    """A query could not be answered: unknown query name, the handler raised, or it
    tried to change the run (schedule an activity, start a timer...)."""

    reason = "QUERY_FAILED"


class QueryTimeoutError(DurableRpcError):
    """No worker answered the query in time (none polls the run's task queue, or the
    one that took it died or is stuck)."""

    reason = "QUERY_TIMEOUT"


class UpdateRejectedError(DurableRpcError):
    """The workflow's update validator rejected the update (or the run has no such
    update): nothing was recorded, the handler did not run."""

    reason = "UPDATE_REJECTED"


class UpdateTimeoutError(DurableRpcError):
    """The update did not reach the stage waited for in time (no worker took it yet, or
    its handler is still running). Retrying with the same update_id is safe."""

    reason = "UPDATE_TIMEOUT"


class UnauthenticatedError(DurableRpcError):
    """The call carried no API key, a malformed one, or one that is unknown, revoked or
    expired."""

    reason = "UNAUTHENTICATED"


class PermissionDeniedError(DurableRpcError):
    """The key is valid but its role or namespace does not allow this call."""

    reason = "PERMISSION_DENIED"


class NamespaceAlreadyExistsError(DurableRpcError):
    reason = "NAMESPACE_ALREADY_EXISTS"


class DefinitionInUseError(DurableRpcError):
    """RemoveDefinition: a live worker or an open run still references the definition."""

    reason = "DEFINITION_IN_USE"


class DefinitionRemovedError(DurableRpcError):
    """Registration of a definition an operator removed (until it is restored)."""

    reason = "DEFINITION_REMOVED"


class WorkflowNotFailedError(DurableRpcError):
    """Redrive of a run that did not fail."""

    reason = "WORKFLOW_NOT_FAILED"


class InvalidPriorityError(InvalidArgumentError):
    """A start's priority outside 1 (most urgent) .. 5."""

    reason = "INVALID_PRIORITY"


class InvalidFairnessKeyError(InvalidArgumentError):
    """A fairness key longer than the store accepts (128 characters)."""

    reason = "INVALID_FAIRNESS_KEY"


class InvalidCleanupTimeoutError(InvalidArgumentError):
    """A cancellation's cleanup timeout that is not positive (unset: no cleanup deadline)."""

    reason = "INVALID_CLEANUP_TIMEOUT"


class SignalNotDeclaredError(DurableRpcError):
    """The run's code does not read this signal (it declared the ones it does, named in
    the message): refused instead of buffered unread."""

    reason = "SIGNAL_NOT_DECLARED"


class ProtocolVersionUnsupportedError(DurableRpcError):
    """A worker and a server whose worker-protocol versions do not overlap (the message
    names both); upgrade the older side."""

    reason = "PROTOCOL_VERSION_UNSUPPORTED"


class BudgetInUseError(DurableRpcError):
    """A budget cannot be removed while a reservation holds or waits for its units."""

    reason = "BUDGET_IN_USE"


class StreamBatchTooLargeError(InvalidArgumentError):
    """An append to a message stream carries more items than one append may (100)."""

    reason = "STREAM_BATCH_TOO_LARGE"


class InvalidRateLimitError(InvalidArgumentError):
    """A rate limit's permits, period or burst out of range (0, negative, malformed)."""

    reason = "INVALID_RATE_LIMIT"


class QueryTooLargeError(InvalidArgumentError):
    """A list query (ListWorkflows, CountWorkflows, BatchWorkflows) longer than the
    server parses (32 KiB of UTF-8)."""

    reason = "QUERY_TOO_LARGE"


class QueryTooComplexError(InvalidArgumentError):
    """A list query that ANDs more comparisons than the server accepts (20)."""

    reason = "QUERY_TOO_COMPLEX"


class InvalidSessionOptionsError(InvalidArgumentError):
    """Worker-session options out of range: ttl <= 0, lease <= 0 or past the ttl, a
    negative activity concurrency, an empty or overlong id or requirement."""

    reason = "INVALID_SESSION_OPTIONS"


class SessionHeldError(DurableRpcError):
    """The session is held by another worker whose lease has not lapsed."""

    reason = "SESSION_HELD"


class SessionRequirementsUnmetError(DurableRpcError):
    """The worker's session capabilities do not meet the session's requirements (or it
    did not register worker sessions)."""

    reason = "SESSION_REQUIREMENTS_UNMET"


class SessionSlotsExhaustedError(DurableRpcError):
    """The worker already holds max_concurrent_worker_sessions live sessions."""

    reason = "SESSION_SLOTS_EXHAUSTED"


class SessionLostError(DurableRpcError):
    """The caller is no longer the session's holder (its lease lapsed and another worker
    took it, or it names an older generation)."""

    reason = "SESSION_LOST"


class SessionClosedError(DurableRpcError):
    """The session is closed (its TTL passed, or it was closed explicitly)."""

    reason = "SESSION_CLOSED"


class SessionNotFoundError(NotFoundError):
    reason = "SESSION_NOT_FOUND"


class PayloadMismatchError(InvalidArgumentError):
    """An uploaded payload does not match its reference: its bytes hash to another
    SHA-256, run past its size, or its size differs from the one stored under that hash."""

    reason = "PAYLOAD_MISMATCH"


class PayloadNotFoundError(NotFoundError):
    """A reference names a payload the namespace does not hold (never uploaded, not
    uploaded whole, or collected by retention), or holds with another size."""

    reason = "PAYLOAD_NOT_FOUND"


class PayloadCorruptError(DurableRpcError):
    """A stored payload no longer matches its reference (size or SHA-256) when read."""

    reason = "PAYLOAD_CORRUPT"


class PayloadTooLargeError(ResourceExhaustedError):
    """A payload over the reader's download cap, or an upload declaring more bytes than
    the server stores for one payload (``max_external_payload_bytes``)."""

    reason = "PAYLOAD_TOO_LARGE"


class PayloadQuotaExceededError(ResourceExhaustedError):
    """An upload that would take the namespace's stored payloads past its quota."""

    reason = "PAYLOAD_QUOTA_EXCEEDED"


class PayloadCodecError(DurableRpcError):
    """A payload codec (``durable_rpc.codec``) could not encode or decode a payload: its
    metadata names an encoding the codec cannot undo, or its bytes are malformed. Raised
    by the SDK that holds the codec; the server never decodes. ``response``: the message
    whose payloads did not decode, as it arrived (a worker fails the task it claimed)."""

    reason = "PAYLOAD_CODEC_FAILED"
    response: object | None = None


class PayloadCodecMissingError(PayloadCodecError):
    """An encoded payload reached a client (or worker) that has no payload codec."""

    reason = "PAYLOAD_CODEC_MISSING"


class PayloadKeyUnknownError(PayloadCodecError):
    """An encrypted payload names a key id the reader's ``AesGcmCodec`` does not hold."""

    reason = "PAYLOAD_KEY_UNKNOWN"


class PayloadDecryptFailedError(PayloadCodecError):
    """An encrypted payload does not authenticate under its key: a wrong key under that
    id, a tampered ciphertext, or metadata changed after encryption."""

    reason = "PAYLOAD_DECRYPT_FAILED"


STATUS_BY_REASON: dict[str, grpc.StatusCode] = {
    LeaseLostError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    WorkflowAlreadyStartedError.reason: grpc.StatusCode.ALREADY_EXISTS,
    NotFoundError.reason: grpc.StatusCode.NOT_FOUND,
    InvalidArgumentError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidPayloadError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    DefinitionChangedError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    NamespaceNotFoundError.reason: grpc.StatusCode.NOT_FOUND,
    WorkflowNotRunningError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    StoreUnavailableError.reason: grpc.StatusCode.UNAVAILABLE,
    ResourceExhaustedError.reason: grpc.StatusCode.RESOURCE_EXHAUSTED,
    HistoryLimitExceededError.reason: grpc.StatusCode.RESOURCE_EXHAUSTED,
    AdmissionLimitError.reason: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ConcurrencyKeyLimitError.reason: grpc.StatusCode.RESOURCE_EXHAUSTED,
    UnimplementedError.reason: grpc.StatusCode.UNIMPLEMENTED,
    InternalError.reason: grpc.StatusCode.INTERNAL,
    PayloadMismatchError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    PayloadNotFoundError.reason: grpc.StatusCode.NOT_FOUND,
    PayloadCorruptError.reason: grpc.StatusCode.DATA_LOSS,
    PayloadTooLargeError.reason: grpc.StatusCode.RESOURCE_EXHAUSTED,
    PayloadQuotaExceededError.reason: grpc.StatusCode.RESOURCE_EXHAUSTED,
    QueryFailedError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    QueryTimeoutError.reason: grpc.StatusCode.DEADLINE_EXCEEDED,
    UpdateRejectedError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    UpdateTimeoutError.reason: grpc.StatusCode.DEADLINE_EXCEEDED,
    UnauthenticatedError.reason: grpc.StatusCode.UNAUTHENTICATED,
    PermissionDeniedError.reason: grpc.StatusCode.PERMISSION_DENIED,
    NamespaceAlreadyExistsError.reason: grpc.StatusCode.ALREADY_EXISTS,
    DefinitionInUseError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    DefinitionRemovedError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    WorkflowNotFailedError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    InvalidPriorityError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidFairnessKeyError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidCleanupTimeoutError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    BudgetInUseError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    ProtocolVersionUnsupportedError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    SignalNotDeclaredError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    InvalidRateLimitError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    StreamBatchTooLargeError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    QueryTooLargeError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    QueryTooComplexError.reason: grpc.StatusCode.INVALID_ARGUMENT,
    PayloadCodecError.reason: grpc.StatusCode.DATA_LOSS,
    PayloadCodecMissingError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    PayloadKeyUnknownError.reason: grpc.StatusCode.FAILED_PRECONDITION,
    PayloadDecryptFailedError.reason: grpc.StatusCode.DATA_LOSS,
}

ERROR_BY_REASON: dict[str, type[DurableRpcError]] = {
    cls.reason: cls
    for cls in (
        LeaseLostError,
        WorkflowAlreadyStartedError,
        NotFoundError,
        InvalidArgumentError,
        InvalidPayloadError,
        DefinitionChangedError,
        NamespaceNotFoundError,
        WorkflowNotRunningError,
        StoreUnavailableError,
        ResourceExhaustedError,
        HistoryLimitExceededError,
        AdmissionLimitError,
        ConcurrencyKeyLimitError,
        UnimplementedError,
        InternalError,
        PayloadMismatchError,
        PayloadNotFoundError,
        PayloadCorruptError,
        PayloadTooLargeError,
        PayloadQuotaExceededError,
        QueryFailedError,
        QueryTimeoutError,
        UpdateRejectedError,
        UpdateTimeoutError,
        UnauthenticatedError,
        PermissionDeniedError,
        NamespaceAlreadyExistsError,
        DefinitionInUseError,
        DefinitionRemovedError,
        WorkflowNotFailedError,
        InvalidPriorityError,
        InvalidFairnessKeyError,
        InvalidCleanupTimeoutError,
        BudgetInUseError,
        ProtocolVersionUnsupportedError,
        SignalNotDeclaredError,
        InvalidRateLimitError,
        StreamBatchTooLargeError,
        QueryTooLargeError,
        QueryTooComplexError,
        PayloadCodecError,
        PayloadCodecMissingError,
        PayloadKeyUnknownError,
        PayloadDecryptFailedError,
    )
}


# Worker sessions (server/_session_service.py): registered apart from the tables above.
for _cls, _code in (
    (InvalidSessionOptionsError, grpc.StatusCode.INVALID_ARGUMENT),
    (SessionHeldError, grpc.StatusCode.FAILED_PRECONDITION),
    (SessionRequirementsUnmetError, grpc.StatusCode.FAILED_PRECONDITION),
    (SessionSlotsExhaustedError, grpc.StatusCode.FAILED_PRECONDITION),
    (SessionLostError, grpc.StatusCode.FAILED_PRECONDITION),
    (SessionClosedError, grpc.StatusCode.FAILED_PRECONDITION),
    (SessionNotFoundError, grpc.StatusCode.NOT_FOUND),
):
    STATUS_BY_REASON[_cls.reason] = _code
    ERROR_BY_REASON[_cls.reason] = _cls
