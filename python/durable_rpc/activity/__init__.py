"""Activities: functions that touch the outside world, run by workers under fenced leases.

```python
from durable_rpc import activity

@activity.defn
async def charge(order_id: str, cents: int) -> str:
    token = activity.info().fencing_token   # protect external writes with it
    activity.heartbeat("charging")
    ...
```
"""

from __future__ import annotations

from durable_rpc.activity._context import (
    ActivityInfo,
    heartbeat,
    heartbeat_details,
    info,
    is_cancelled,
    session,
)
from durable_rpc.activity._definition import ActivityDefinition, defn
from durable_rpc.activity._errors import ApplicationError

__all__ = [
    "ActivityDefinition",
    "ActivityInfo",
    "ApplicationError",
    "defn",
    "heartbeat",
    "heartbeat_details",
    "info",
    "is_cancelled",
    "session",
]
