"""Workflows: deterministic async Python whose progress survives any crash.

```python
from datetime import timedelta
from durable_rpc import workflow

@workflow.defn(version="1")
class Checkout:
    def __init__(self) -> None:
        self.approved = False

    @workflow.signal
    def approve(self) -> None:
        self.approved = True

    @workflow.run
    async def run(self, order_id: str) -> str:
        await workflow.wait_condition(lambda: self.approved)
        return await workflow.execute_activity(
            charge, order_id, start_to_close_timeout=timedelta(seconds=30)
        )
```

Workflow code runs on a deterministic event loop: asyncio.gather / wait / create_task /
Event / Lock work; real timers and I/O raise. Use ``workflow.sleep``, ``workflow.now``,
``workflow.random`` and ``workflow.uuid4`` instead of their non-deterministic cousins,
``workflow.side_effect`` for a small non-deterministic value recorded once, activities
for anything that touches the outside world, and ``workflow.patched`` /
``workflow.deprecate_patch`` (or the numbered ``workflow.get_version``) to change code
that open runs are still replaying.
"""

from __future__ import annotations

from durable_rpc.activity._errors import ApplicationError
from durable_rpc.workflow._api import (
    DEFAULT_VERSION,
    continue_as_new,
    deprecate_patch,
    execute_activity,
    execute_local_activity,
    get_version,
    in_workflow,
    info,
    now,
    patched,
    random,
    select,
    set_signal_handler,
    side_effect,
    sleep,
    upsert_memo,
    upsert_search_attributes,
    uuid4,
    wait_condition,
)
from durable_rpc.workflow._budgets import BudgetError, Reservation, reserve
from durable_rpc.workflow._cancel_api import cancellation, shield
from durable_rpc.workflow._cancellation import CancellationPolicy, CancellationRequest, Shield
from durable_rpc.workflow._child_api import execute_child_workflow, start_child_workflow
from durable_rpc.workflow._children import (
    ChildWorkflowError,
    ChildWorkflowHandle,
    ChildWorkflowStartError,
    ParentClosePolicy,
)
from durable_rpc.workflow._definition import (
    QueryDefinition,
    SignalDefinition,
    UpdateDefinition,
    UpdateMethod,
    WorkflowDefinition,
    definition_of,
    defn,
    query,
    run,
    signal,
    update,
)
from durable_rpc.workflow._errors import (
    ActivityError,
    AmbiguousEffectError,
    ContinueAsNewError,
    RestrictedOperationError,
    WorkflowTaskError,
)
from durable_rpc.workflow._external import (
    ExternalSignalError,
    ExternalWorkflowHandle,
    get_external_workflow_handle,
)
from durable_rpc.workflow._logger import logger
from durable_rpc.workflow._members import ParallelGroupError
from durable_rpc.workflow._parallel import (
    ParallelCall,
    ParallelCompletion,
    ParallelFailure,
    ParallelMemberFailure,
    parallel,
)
from durable_rpc.workflow._retry import RetryPolicy
from durable_rpc.workflow._runtime import WorkflowInfo, WorkflowInstance
from durable_rpc.workflow._saga import CompensationError, Saga
from durable_rpc.workflow._selection import (
    DurableOperationCancelled,
    DurableOperationHandle,
    Selection,
    SelectionResult,
    selection,
)
from durable_rpc.workflow._streams import StreamItem, WorkflowStream, stream

__all__ = [
    "BudgetError",
    "Reservation",
    "reserve",
    "stream",
    "StreamItem",
    "WorkflowStream",
    "CancellationPolicy",
    "CancellationRequest",
    "Shield",
    "cancellation",
    "shield",
    "ChildWorkflowError",
    "ChildWorkflowHandle",
    "ChildWorkflowStartError",
    "ParentClosePolicy",
    "ExternalSignalError",
    "ExternalWorkflowHandle",
    "get_external_workflow_handle",
    "execute_child_workflow",
    "start_child_workflow",
    "ActivityError",
    "AmbiguousEffectError",
    "ApplicationError",
    "CompensationError",
    "ContinueAsNewError",
    "DurableOperationCancelled",
    "DurableOperationHandle",
    "ParallelCall",
    "ParallelCompletion",
    "ParallelFailure",
    "ParallelGroupError",
    "ParallelMemberFailure",
    "Selection",
    "SelectionResult",
    "RestrictedOperationError",
    "RetryPolicy",
    "Saga",
    "SignalDefinition",
    "UpdateDefinition",
    "UpdateMethod",
    "QueryDefinition",
    "WorkflowDefinition",
    "WorkflowInfo",
    "WorkflowInstance",
    "WorkflowTaskError",
    "continue_as_new",
    "definition_of",
    "defn",
    "deprecate_patch",
    "DEFAULT_VERSION",
    "execute_activity",
    "execute_local_activity",
    "get_version",
    "in_workflow",
    "info",
    "logger",
    "now",
    "parallel",
    "patched",
    "query",
    "random",
    "run",
    "select",
    "selection",
    "set_signal_handler",
    "side_effect",
    "signal",
    "sleep",
    "update",
    "upsert_memo",
    "upsert_search_attributes",
    "uuid4",
    "wait_condition",
]
