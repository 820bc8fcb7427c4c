"""Workers: claim workflow and activity tasks under fenced leases and run them.

```python
worker = Worker(client, task_queue="orders", workflows=[Checkout], activities=[charge])
config = WorkflowSupervisorConfig(8).with_backoff(timedelta(milliseconds=25), timedelta(seconds=5))
token = CancellationToken()          # token.cancel() from a signal handler
report = await WorkflowSupervisor(worker, config).run(token)
```

or, for a worker in the background of a block: ``async with Worker(...) as worker: ...``.
"""

from __future__ import annotations

from durable_rpc.worker._client import WorkerClient
from durable_rpc.worker._sticky_cache import (
    StickyCacheMetrics,
    StickyCacheOptions,
    StickyCacheOptionsError,
)
from durable_rpc.worker._supervisor import (
    CancellationToken,
    SupervisorReport,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
)
from durable_rpc.worker._worker import DefinitionUnavailableError, Worker, default_worker_id
from durable_rpc.worker._workflow_task import replay

__all__ = [
    "CancellationToken",
    "DefinitionUnavailableError",
    "StickyCacheMetrics",
    "StickyCacheOptions",
    "StickyCacheOptionsError",
    "SupervisorReport",
    "Worker",
    "WorkerClient",
    "WorkflowSupervisor",
    "WorkflowSupervisorConfig",
    "default_worker_id",
    "replay",
]
