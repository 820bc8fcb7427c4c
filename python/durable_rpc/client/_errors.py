"""How a run ended, when it did not complete: raised by ``WorkflowHandle.result()``."""

from __future__ import annotations

from durable_rpc.v1 import payload_pb2


class WorkflowOutcomeError(Exception):
    """The run closed without a result."""

    def __init__(self, workflow_id: str, run_id: str, message: str) -> None:
        super().__init__(message)
        self.workflow_id = workflow_id
        self.run_id = run_id


class WorkflowFailureError(WorkflowOutcomeError):
    """The workflow raised; ``failure`` is what it raised (type, message, stack)."""

    def __init__(self, workflow_id: str, run_id: str, failure: payload_pb2.Failure) -> None:
        super().__init__(
            workflow_id, run_id, f"workflow {workflow_id} failed: {failure.type}: {failure.message}"
        )
        self.failure = failure
        self.failure_type = failure.type
        self.failure_message = failure.message


class WorkflowCancelledError(WorkflowOutcomeError):
    """The workflow accepted a cancellation request and ended cancelled."""


class WorkflowTerminatedError(WorkflowOutcomeError):
    """An operator terminated the run."""


class WorkflowTimedOutError(WorkflowOutcomeError):
    """The run exceeded its execution or run timeout."""


class WorkflowUpdateFailedError(Exception):
    """The update's handler raised; ``failure`` is what it raised (type, message, stack).
    The run itself goes on."""

    def __init__(self, workflow_id: str, update_id: str, failure: payload_pb2.Failure) -> None:
        super().__init__(
            f"update {update_id} of workflow {workflow_id} failed: "
            f"{failure.type}: {failure.message}"
        )
        self.workflow_id = workflow_id
        self.update_id = update_id
        self.failure = failure
        self.failure_type = failure.type
        self.failure_message = failure.message
