"""A run's statuses, once: the names the store keeps and the CLI and web UI filter by,
each beside its wire value. They are read from the API's ``WorkflowStatus`` enum, so a
status added there reaches every list without another edit."""

from __future__ import annotations

from durable_rpc.v1 import service_pb2

_PREFIX = "WORKFLOW_STATUS_"

#: A status name (``"timed_out"``) -> its ``WorkflowStatus`` value, in the enum's order,
#: which is the order lists show them in. ``UNSPECIFIED`` is no status a run can have.
STATUS_VALUES: dict[str, service_pb2.WorkflowStatus.ValueType] = {
    name.removeprefix(_PREFIX).lower(): number
    for name, number in service_pb2.WorkflowStatus.items()
    if number != service_pb2.WORKFLOW_STATUS_UNSPECIFIED
}
#: A ``WorkflowStatus`` value -> its name.
STATUS_NAMES: dict[service_pb2.WorkflowStatus.ValueType, str] = {
    number: name for name, number in STATUS_VALUES.items()
}
#: Every status name, in the enum's order.
STATUSES: tuple[str, ...] = tuple(STATUS_VALUES)
