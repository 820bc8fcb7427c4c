"""The result of ``Client.count_workflows``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from durable_rpc.run_statuses import STATUS_NAMES
from durable_rpc.v1 import service_pb2


@dataclasses.dataclass(frozen=True)
class WorkflowCounts:
    """Matching runs by status name (``"running"``, ``"completed"``, ...; a status no
    run has is absent) and their sum."""

    by_status: Mapping[str, int]
    total: int

    def __getitem__(self, status: str) -> int:
        """The count of ``status`` (0 when no matching run has it)."""
        return self.by_status.get(status, 0)


def counts_from_proto(reply: service_pb2.CountWorkflowsResponse) -> WorkflowCounts:
    return WorkflowCounts(
        by_status={STATUS_NAMES.get(c.status, "unspecified"): c.count for c in reply.counts},
        total=reply.total,
    )
