"""durable-rpc: a durable workflow engine with a gRPC API and a Rust core.

Write workflows with :mod:`durable_rpc.workflow` and activities with
:mod:`durable_rpc.activity`; run them with a :class:`Worker`; start and drive them
with a :class:`Client`.
"""

from __future__ import annotations

from durable_rpc import activity, workflow
from durable_rpc._core import NondeterminismError
from durable_rpc._registration import DuplicateRegistrationError
from durable_rpc.activity import ApplicationError
from durable_rpc.client import (
    Client,
    ScheduleOverlap,
    ScheduleSpec,
    TLSConfig,
    WorkflowCancelledError,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowOutcomeError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
)
from durable_rpc.converter import ConversionError
from durable_rpc.errors import (
    DefinitionChangedError,
    DurableRpcError,
    HistoryLimitExceededError,
    InternalError,
    InvalidArgumentError,
    InvalidPayloadError,
    LeaseLostError,
    NamespaceNotFoundError,
    NotFoundError,
    PermissionDeniedError,
    QueryFailedError,
    QueryTimeoutError,
    ResourceExhaustedError,
    StoreUnavailableError,
    UnauthenticatedError,
    UpdateRejectedError,
    UpdateTimeoutError,
    WorkflowAlreadyStartedError,
    WorkflowNotRunningError,
)
from durable_rpc.payload import PayloadError
from durable_rpc.worker import (
    CancellationToken,
    StickyCacheMetrics,
    StickyCacheOptions,
    SupervisorReport,
    Worker,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
)
from durable_rpc.workflow import (
    ActivityError,
    AmbiguousEffectError,
    RetryPolicy,
    WorkflowTaskError,
)

__all__ = [
    "ActivityError",
    "AmbiguousEffectError",
    "ApplicationError",
    "CancellationToken",
    "Client",
    "ConversionError",
    "DefinitionChangedError",
    "DuplicateRegistrationError",
    "DurableRpcError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidPayloadError",
    "LeaseLostError",
    "NamespaceNotFoundError",
    "NondeterminismError",
    "NotFoundError",
    "PermissionDeniedError",
    "TLSConfig",
    "UnauthenticatedError",
    "QueryFailedError",
    "QueryTimeoutError",
    "PayloadError",
    "HistoryLimitExceededError",
    "ResourceExhaustedError",
    "RetryPolicy",
    "ScheduleOverlap",
    "ScheduleSpec",
    "StickyCacheMetrics",
    "StickyCacheOptions",
    "StoreUnavailableError",
    "SupervisorReport",
    "Worker",
    "WorkflowAlreadyStartedError",
    "WorkflowCancelledError",
    "WorkflowFailureError",
    "WorkflowHandle",
    "WorkflowNotRunningError",
    "WorkflowOutcomeError",
    "WorkflowSupervisor",
    "WorkflowSupervisorConfig",
    "WorkflowTaskError",
    "WorkflowTerminatedError",
    "WorkflowTimedOutError",
    "activity",
    "workflow",
    "UpdateRejectedError",
    "UpdateTimeoutError",
    "WorkflowUpdateFailedError",
    "WorkflowUpdateHandle",
]
