"""The PostgreSQL hot path: a decision recorded by one call of ``drpc_record_decision``
(``_pg_hot_sql``), one round trip instead of ~9 — a workflow-task completion, or an
activity completion carrying an inline decision — and a start (with its folded claim)
by one call of ``drpc_start_workflow``.

``DecisionCall.build`` says whether a completion has the shape the function covers and
prepares its arguments (everything that does not depend on the commit's database time,
serialized as the general path serializes it); ``DecisionCall.answer`` turns the
function's row into the store's answer and the notes the general path would have
delivered. A call the function hands back (SQLSTATE ``DRFB1``) runs the general path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from durable_rpc.store._logic import activity_timeouts
from durable_rpc.store._ops_leases import lease_check_at
from durable_rpc.store._options import HistoryLimits, StoreStats
from durable_rpc.store._records import (
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    EagerActivities,
    LeaseRef,
    RunOutcome,
    WorkflowTaskCompletion,
)
from durable_rpc.store._tx import Notes
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2

CALL = "SELECT * FROM drpc_record_decision(" + ", ".join(["%s"] * 30) + ")"


@dataclass(frozen=True, slots=True)
class _Scheduled:
    command: workflow_task_pb2.ScheduleActivity
    seq: int
    eager: bool
    lease_ms: int
    start_to_close_ms: int | None
    schedule_to_close_ms: int | None
    schedule_to_start_ms: int | None
    heartbeat_ms: int | None


def _references_payloads(
    decision: Decision, commands: list[workflow_task_pb2.Command], closing: bool
) -> bool:
    """Whether the decision holds an external payload reference: its activity result, the
    run's result, an activity's input (the only payloads of the shapes the function
    covers)."""
    if decision.result is not None and decision.result.HasField("external"):
        return True
    if closing:
        return commands[0].complete_workflow.result.HasField("external")
    return any(c.schedule_activity.input.HasField("external") for c in commands)


@dataclass(frozen=True, slots=True)
class Decision:
    """The decision to record and the task it completes."""

    namespace: str
    lease: LeaseRef
    #: "activity": the completion of an activity whose result (a Payload) the decision
    #: saw; "workflow": the completion of a workflow task.
    kind: str
    last_seen_event_id: int
    commands: Sequence[workflow_task_pb2.Command]
    build_id: str
    eager: EagerActivities | None
    #: The run the worker decided for (activity completions; the function checks it).
    run_id: str | None = None
    result: payload_pb2.Payload | None = None


@dataclass(frozen=True, slots=True)
class DecisionCall:
    worker_id: str
    scheduled: tuple[_Scheduled, ...]
    close_result: payload_pb2.Payload | None
    namespace: str
    args: tuple[Any, ...]

    @classmethod
    def build(
        cls,
        decision: Decision,
        limits: HistoryLimits,
        default_lease_ms: int,
        channel: str,
        origin: str,
    ) -> DecisionCall | None:
        """The call for this decision, or None when its shape is not the function's (the
        caller validated the commands): one that only schedules activities (asking for
        eager dispatch, which names the run's queue), or only completes the run."""
        commands = list(decision.commands)
        kinds = [c.WhichOneof("kind") for c in commands]
        closing = kinds == ["complete_workflow"]
        if not closing and any(kind != "schedule_activity" for kind in kinds):
            return None
        if decision.kind == "workflow" and not commands:
            return None  # whether it needs a marker at all is the general path's question
        if _references_payloads(decision, commands, closing):
            # The function writes history without the payload refs (``_payloads``).
            return None
        if any(
            c.schedule_activity.options.rate_limit_key
            or c.schedule_activity.options.priority
            or c.schedule_activity.options.HasField("session")
            for c in commands
        ):
            # The function's INSERT has no rate_limit_key or session_id column and gives a
            # task its run's priority: the general path records the key, the activity's
            # own priority or its worker session (``_rate_limits``, ``_fairness``,
            # ``_sessions``).
            return None
        eager = decision.eager or EagerActivities("", frozenset(), 0)
        # The run's queue: a worker that asks for eager activities polls it (the
        # function checks); without that ask, only a decision scheduling nothing qualifies.
        run_queue = eager.task_queue
        if not run_queue and not closing and commands:
            return None
        scheduled = [_scheduled(c, default_lease_ms) for c in (() if closing else commands)]
        # _ops_workflow_tasks._eager_seqs: the first `limit` eligible, in command order.
        eligible = [
            i
            for i, s in enumerate(scheduled)
            if s.command.task_queue in ("", run_queue)
            and s.command.activity_type in eager.activity_types
        ][: max(eager.limit, 0)]
        for i in eligible:
            scheduled[i] = replace(scheduled[i], eager=True)
        queues = {s.command.task_queue or run_queue for s in scheduled}
        on_queue = sum(1 for s in scheduled if (s.command.task_queue or run_queue) == run_queue)
        if eligible and len(eligible) == on_queue:
            # Every activity on the run's queue goes to this worker: nobody to wake there.
            queues.discard(run_queue)
        namespace, lease = decision.namespace, decision.lease
        close_result = commands[0].complete_workflow.result if closing else None
        result = decision.result
        args = (
            namespace,
            decision.kind,
            lease.task_id,
            lease.worker_id,
            lease.fencing_token,
            history_pb2.ActivityCompleted(result=result).SerializeToString()
            if result is not None
            else None,
            history_pb2.ActivityCompleted(
                worker_id=lease.worker_id, fencing_token=lease.fencing_token
            ).SerializeToString(),
            decision.run_id,
            run_queue or None,
            decision.last_seen_event_id,
            history_pb2.WorkflowTaskCompleted(
                worker_id=lease.worker_id, build_id=decision.build_id
            ).SerializeToString(),
            [s.seq for s in scheduled],
            [s.command.activity_type for s in scheduled],
            [s.command.task_queue for s in scheduled],
            [s.command.input.SerializeToString() for s in scheduled],
            [s.command.options.SerializeToString() for s in scheduled],
            [_scheduled_attributes(s, run_queue) for s in scheduled],
            [s.lease_ms for s in scheduled],
            [s.start_to_close_ms for s in scheduled],
            [s.schedule_to_close_ms for s in scheduled],
            [s.schedule_to_start_ms for s in scheduled],
            [
                json.dumps(dict(s.command.trace_context)) if s.command.trace_context else None
                for s in scheduled
            ],
            [s.eager for s in scheduled],
            history_pb2.WorkflowCompleted(result=close_result).SerializeToString()
            if close_result is not None
            else None,
            close_result.SerializeToString() if close_result is not None else None,
            limits.max_events,
            limits.max_bytes,
            channel,
            origin,
            # Queues whose activity polls the commit wakes (the function may add to them).
            sorted(queues),
        )
        return cls(lease.worker_id, tuple(scheduled), close_result, namespace, args)

    def answer(
        self, row: dict[str, Any], stats: StoreStats
    ) -> tuple[WorkflowTaskCompletion, Notes]:
        """The recorded decision and the notes to deliver locally, from the function's row
        (the eager claims it deferred are counted in ``stats``)."""
        namespace, run_id = self.namespace, str(row["o_run_id"])
        claimed = [
            ClaimedActivityTask(
                task_id=task_id,
                worker_id=self.worker_id,
                fencing_token=1,
                lease_expires_at_ms=expires,
                workflow_id=row["o_workflow_id"],
                run_id=run_id,
                seq=s.seq,
                activity_type=s.command.activity_type,
                input=s.command.input.SerializeToString(),
                attempt=1,
                heartbeat_details=None,
                heartbeat_timeout_ms=s.heartbeat_ms,
                start_to_close_timeout_ms=s.start_to_close_ms,
                options=s.command.options.SerializeToString(),
                trace_context=dict(s.command.trace_context),
            )
            for s, task_id, expires in zip(
                self.scheduled, row["o_task_ids"], row["o_expires"], strict=True
            )
            if s.eager and expires is not None  # else deferred by a limit: left queued
        ]
        stats.deferred_claims += row["o_deferred_by_limit"]
        stats.rate_deferred_claims += row["o_deferred_by_rate"]
        claimed.sort(key=lambda task: task.seq)
        notes = Notes()
        notes.tasks.update((namespace, queue, "activity") for queue in row["o_wake"])
        notes.due.update(row["o_dues"])
        if self.close_result is not None:
            notes.closed.append((namespace, run_id))
            notes.outcomes[(namespace, run_id)] = RunOutcome(
                run_id, "completed", self.close_result.SerializeToString(), None
            )
        events = [bytes(e) for e in row["o_events"]]
        return WorkflowTaskCompletion(claimed, events, row["o_history_length"]), notes


def _scheduled(command: workflow_task_pb2.Command, default_lease_ms: int) -> _Scheduled:
    spec = command.schedule_activity
    timeouts = activity_timeouts(spec.options)
    return _Scheduled(
        spec,
        command.seq,
        False,
        timeouts.lease_ms(default_lease_ms),
        timeouts.start_to_close_ms,
        timeouts.schedule_to_close_ms,
        timeouts.schedule_to_start_ms,
        timeouts.heartbeat_ms,
    )


def _scheduled_attributes(s: _Scheduled, run_queue: str) -> bytes:
    """ActivityScheduled as _ops_commands._apply_command serializes it."""
    spec = s.command
    return history_pb2.ActivityScheduled(
        seq=s.seq,
        activity_type=spec.activity_type,
        input=spec.input,
        task_queue=spec.task_queue or run_queue,
        options=spec.options,
    ).SerializeToString()


START_CALL = "SELECT * FROM drpc_start_workflow(" + ", ".join(["%s"] * 15) + ")"


@dataclass(frozen=True, slots=True)
class StartCall:
    """A start as one call of ``drpc_start_workflow``: one without memo, search
    attributes, timeouts or parent (those take the general path), with a request id."""

    namespace: str
    workflow_id: str
    workflow_type: str
    version: str
    task_queue: str
    run_id: str
    claim_worker: str | None
    lease_ms: int
    args: tuple[Any, ...]

    @classmethod
    def build(
        cls,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        version: str,
        task_queue: str,
        payload: payload_pb2.Payload,
        request_id: str,
        trace_context: dict[str, str],
        run_id: str,
        claim: tuple[str, int] | None,
        limits: HistoryLimits,
        channel: str,
        origin: str,
    ) -> StartCall:
        # WorkflowStarted as create_run serializes it, split around the fingerprint (7),
        # which the run's INSERT looks up.
        head = history_pb2.WorkflowStarted(
            workflow_type=workflow_type,
            workflow_version=version,
            workflow_id=workflow_id,
            run_id=run_id,
            task_queue=task_queue,
            input=payload,
        ).SerializeToString()
        tail = history_pb2.WorkflowStarted(
            request_id=request_id, trace_context=trace_context
        ).SerializeToString()
        worker, lease_ms = claim if claim is not None else (None, 0)
        args = (
            namespace,
            workflow_id,
            workflow_type,
            version,
            task_queue,
            request_id,
            run_id,
            head,
            tail,
            limits.max_events,
            limits.max_bytes,
            worker,
            lease_ms,
            channel,
            origin,
        )
        return cls(
            namespace,
            workflow_id,
            workflow_type,
            version,
            task_queue,
            run_id,
            worker,
            lease_ms,
            args,
        )

    def answer(self, row: dict[str, Any]) -> tuple[ClaimedWorkflowTask | None, Notes]:
        """The claimed first task (None: not claimed) and the notes to deliver locally."""
        notes = Notes()
        now = int(row["o_now"])
        if not row["o_claimed"] or self.claim_worker is None:
            notes.tasks.add((self.namespace, self.task_queue, "workflow"))
            return None, notes
        expires = now + self.lease_ms
        notes.due.add(lease_check_at(expires))
        event = bytes(row["o_event"])
        task = ClaimedWorkflowTask(
            task_id=row["o_task_id"],
            worker_id=self.claim_worker,
            fencing_token=row["o_token"],
            lease_expires_at_ms=expires,
            workflow_time_ms=now,
            attempt=row["o_attempt"],
            workflow_id=self.workflow_id,
            run_id=self.run_id,
            workflow_type=self.workflow_type,
            workflow_version=self.version,
            task_queue=self.task_queue,
            events=[event],
            history_length=1,
            history_size_bytes=len(event),
        )
        return task, notes
