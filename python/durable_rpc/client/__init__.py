"""The durable-rpc client: start workflows and drive their runs over gRPC."""

from __future__ import annotations

from durable_rpc.client._channel import TLSConfig
from durable_rpc.client._client import Client, default_address
from durable_rpc.client._counts import WorkflowCounts
from durable_rpc.client._errors import (
    WorkflowCancelledError,
    WorkflowFailureError,
    WorkflowOutcomeError,
    WorkflowTerminatedError,
    WorkflowTimedOutError,
    WorkflowUpdateFailedError,
)
from durable_rpc.client._handle import (
    WorkflowDescription,
    WorkflowHandle,
    WorkflowInfo,
    WorkflowRedriveResult,
    WorkflowUpdateHandle,
)
from durable_rpc.client._schedules import (
    ScheduleActionInfo,
    ScheduleDescription,
    ScheduleOverlap,
    ScheduleSpec,
)
from durable_rpc.client._streams import (
    StreamAppendResult,
    StreamDescription,
    StreamItem,
    StreamPage,
    WorkflowStream,
)

__all__ = [
    "Client",
    "ScheduleActionInfo",
    "ScheduleDescription",
    "ScheduleOverlap",
    "ScheduleSpec",
    "StreamAppendResult",
    "StreamDescription",
    "StreamItem",
    "StreamPage",
    "TLSConfig",
    "WorkflowCancelledError",
    "WorkflowCounts",
    "WorkflowDescription",
    "WorkflowFailureError",
    "WorkflowHandle",
    "WorkflowInfo",
    "WorkflowOutcomeError",
    "WorkflowRedriveResult",
    "WorkflowStream",
    "WorkflowTerminatedError",
    "WorkflowTimedOutError",
    "WorkflowUpdateFailedError",
    "WorkflowUpdateHandle",
    "default_address",
]
