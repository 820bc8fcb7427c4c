"""A minimal stand-in for the server's history bookkeeping, to record real histories.

It runs each workflow task through the real replay machine + runtime
(:func:`durable_rpc.worker.replay`), appends the marker and command events the server
would append, then the input events a test scripts (activity results, timer fires,
signals).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durable_rpc import converter
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2
from durable_rpc.worker import replay
from durable_rpc.workflow import WorkflowDefinition

BASE_MS = 1_735_787_045_000
RUN_ID = "0b0d2a4e-7d2f-4b52-9b66-3c1f0a3b0001"


class Recorder:
    def __init__(self, definition: WorkflowDefinition, *args: Any) -> None:
        self.definition = definition
        self.history = history_pb2.History()
        self.clock_ms = BASE_MS
        self.add(
            workflow_started=history_pb2.WorkflowStarted(
                workflow_type=definition.name,
                workflow_version=definition.version,
                workflow_id="wf-rec",
                run_id=RUN_ID,
                task_queue="tq",
                input=payload_pb2.Payload(data=converter.encode_args(args)),
            )
        )

    def add(self, **attrs: Any) -> None:
        event = self.history.events.add(event_id=len(self.history.events) + 1)
        event.event_time.FromMilliseconds(self.clock_ms)
        ((field, value),) = attrs.items()
        getattr(event, field).CopyFrom(value)

    def task(self, definition: WorkflowDefinition | None = None) -> list[workflow_task_pb2.Command]:
        """One workflow task: replay, then record the marker and the command events."""
        self.clock_ms += 1000
        commands = list(
            replay(
                definition or self.definition,
                self.history.SerializeToString(),
                self.clock_ms,
                task_queue="tq",
            )
        )
        marker = history_pb2.WorkflowTaskCompleted(last_seen_event_id=len(self.history.events))
        marker.workflow_time.FromMilliseconds(self.clock_ms)
        self.add(workflow_task_completed=marker)
        for command in commands:
            self._record(command)
        return commands

    def _record(self, command: workflow_task_pb2.Command) -> None:
        kind = command.WhichOneof("kind")
        if kind == "schedule_activity":
            a = command.schedule_activity
            self.add(
                activity_scheduled=history_pb2.ActivityScheduled(
                    seq=command.seq,
                    activity_type=a.activity_type,
                    input=a.input,
                    task_queue=a.task_queue,
                    options=a.options,
                )
            )
        elif kind == "start_timer":
            self.add(
                timer_started=history_pb2.TimerStarted(
                    seq=command.seq, duration=command.start_timer.duration
                )
            )
        elif kind == "cancel_timer":
            self.add(timer_cancelled=history_pb2.TimerCancelled(seq=command.cancel_timer.timer_seq))
        elif kind == "complete_workflow":
            self.add(
                workflow_completed=history_pb2.WorkflowCompleted(
                    result=command.complete_workflow.result
                )
            )
        elif kind == "fail_workflow":
            self.add(
                workflow_failed=history_pb2.WorkflowFailed(failure=command.fail_workflow.failure)
            )
        elif kind == "cancel_workflow":
            self.add(workflow_cancelled=history_pb2.WorkflowCancelled())
        else:
            raise AssertionError(f"unexpected command {kind}")

    def activity_completed(self, seq: int, value: Any) -> None:
        self.add(
            activity_completed=history_pb2.ActivityCompleted(
                seq=seq, result=payload_pb2.Payload(data=converter.encode(value)), attempt=1
            )
        )

    def activity_failed(self, seq: int, type_: str, message: str) -> None:
        self.add(
            activity_failed=history_pb2.ActivityFailed(
                seq=seq, failure=payload_pb2.Failure(type=type_, message=message), attempt=2
            )
        )

    def timer_fired(self, seq: int) -> None:
        self.add(timer_fired=history_pb2.TimerFired(seq=seq))

    def signal(self, name: str, *args: Any) -> None:
        self.add(
            signal_received=history_pb2.SignalReceived(
                signal_name=name, input=payload_pb2.Payload(data=converter.encode_args(args))
            )
        )

    def cancel_requested(self, reason: str = "") -> None:
        self.add(cancel_requested=history_pb2.CancelRequested(reason=reason))

    def replay_all(self, definition: WorkflowDefinition | None = None) -> Sequence[Any]:
        """Replay the whole history (as a later task would) and return the new commands."""
        return replay(
            definition or self.definition,
            self.history.SerializeToString(),
            self.clock_ms + 1000,
            task_queue="tq",
        )
