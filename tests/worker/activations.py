"""Helpers to drive the workflow runtime with hand-built activations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from durable_rpc import converter
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from durable_rpc.workflow import WorkflowInstance, definition_of

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
RUN_ID = "7b1e6c52-0c7a-4f43-9b8e-1f6f1f0c0001"


def activation(
    *jobs: workflow_task_pb2.ActivationJob, at: datetime = T0, replaying: bool = False
) -> workflow_task_pb2.Activation:
    a = workflow_task_pb2.Activation(run_id=RUN_ID, is_replaying=replaying, jobs=list(jobs))
    a.timestamp.FromDatetime(at)
    return a


def start(cls: type, *args: Any) -> workflow_task_pb2.ActivationJob:
    d = definition_of(cls)
    return workflow_task_pb2.ActivationJob(
        event_id=1,
        start_workflow=workflow_task_pb2.StartWorkflowJob(
            workflow_type=d.name,
            workflow_version=d.version,
            workflow_id="wf-1",
            run_id=RUN_ID,
            input=payload_pb2.Payload(data=converter.encode_args(args)),
        ),
    )


def completed(seq: int, value: Any) -> workflow_task_pb2.ActivationJob:
    return workflow_task_pb2.ActivationJob(
        resolve_activity=workflow_task_pb2.ResolveActivityJob(
            seq=seq, completed=payload_pb2.Payload(data=converter.encode(value)), attempt=1
        )
    )


def failed(
    seq: int, type_: str, message: str, *, ambiguous: bool = False, attempt: int = 1
) -> workflow_task_pb2.ActivationJob:
    return workflow_task_pb2.ActivationJob(
        resolve_activity=workflow_task_pb2.ResolveActivityJob(
            seq=seq,
            failed=payload_pb2.Failure(type=type_, message=message),
            attempt=attempt,
            ambiguous=ambiguous,
        )
    )


def fire(seq: int) -> workflow_task_pb2.ActivationJob:
    return workflow_task_pb2.ActivationJob(fire_timer=workflow_task_pb2.FireTimerJob(seq=seq))


def signal(name: str, *args: Any) -> workflow_task_pb2.ActivationJob:
    return workflow_task_pb2.ActivationJob(
        signal_workflow=workflow_task_pb2.SignalWorkflowJob(
            signal_name=name, input=payload_pb2.Payload(data=converter.encode_args(args))
        )
    )


def cancel(reason: str = "") -> workflow_task_pb2.ActivationJob:
    return workflow_task_pb2.ActivationJob(
        cancel_workflow=workflow_task_pb2.CancelWorkflowJob(reason=reason)
    )


def instance(cls: type) -> WorkflowInstance:
    return WorkflowInstance(definition_of(cls), task_queue="tq")


def kinds(commands: Sequence[workflow_task_pb2.Command]) -> list[str]:
    return [str(c.WhichOneof("kind")) for c in commands]


def result_of(command: workflow_task_pb2.Command, hint: Any = Any) -> Any:
    return converter.decode(command.complete_workflow.result.data, hint)
