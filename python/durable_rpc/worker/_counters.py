"""What a worker process counted since it started, for ``durable-rpc worker list``.

Plain integers bumped on the worker's own event loop as it claims and reports tasks;
nothing is sent on the task path: the worker heartbeat carries a snapshot
(``WorkerHeartbeatRequest.counters``) and the server stores it with the heartbeat's own
write, so ListWorkers shows the numbers as of the last heartbeat.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Literal, TypeVar

from durable_rpc.v1 import service_pb2

Outcome = Literal["completed", "failed", "lease_lost"]
_O = TypeVar("_O", bound=Outcome)


class WorkerCounters:
    """Claims, outcomes and execution slots of one worker process.

    ``claims`` counts every workflow or activity task the worker received (polled, handed
    over eagerly with a completion, or decided inline with an activity's result; queries
    are not tasks); each one's outcome adds to ``completions``, ``failures`` (an attempt
    or workflow task that failed, or whose run raised before a report) or
    ``lease_losses`` (fenced out: another owner took over). ``in_use`` is the tasks
    executing now; the totals are the supervisor's workflow cycles and the activity slots.
    """

    def __init__(self, activity_slots: int = 0) -> None:
        self.claims = 0
        self.completions = 0
        self.failures = 0
        self.lease_losses = 0
        self.in_use = 0
        self.activity_slots = activity_slots
        #: Set by the supervisor that runs the worker (its cycles polling workflow tasks).
        self.workflow_slots = 0

    async def counted(self, execution: Awaitable[_O]) -> _O:
        """Runs the execution of one claimed task, counting its claim, its slot while it
        runs and its outcome (one that raises counts as a failure)."""
        self.claims += 1
        self.in_use += 1
        outcome: Outcome | None = None
        try:
            outcome = await execution
            return outcome
        finally:
            self.in_use -= 1
            self._count(outcome)

    def _count(self, outcome: Outcome | None) -> None:
        if outcome == "completed":
            self.completions += 1
        elif outcome == "lease_lost":
            self.lease_losses += 1
        else:
            self.failures += 1

    def decided_inline(self) -> None:
        """A workflow task decided inline with an activity's result, and recorded."""
        self.claims += 1
        self.completions += 1

    def message(self) -> service_pb2.WorkerCounters:
        """The snapshot a heartbeat carries."""
        return service_pb2.WorkerCounters(
            claims=self.claims,
            completions=self.completions,
            failures=self.failures,
            lease_losses=self.lease_losses,
            slots_in_use=self.in_use,
            slots_total=self.workflow_slots + self.activity_slots,
        )
