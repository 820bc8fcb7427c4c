"""Activities, as the runtime tracks them: ScheduleActivity and RequestCancelActivity
commands, and the awaiting future resolved from the activity's outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from durable_rpc import converter, payload
from durable_rpc.activity._failure import application_error_from_failure
from durable_rpc.v1 import options_pb2, payload_pb2, workflow_task_pb2
from durable_rpc.workflow._errors import ActivityError, AmbiguousEffectError, WorkflowTaskError
from durable_rpc.workflow._instance import InstanceState
from durable_rpc.workflow._values import PendingActivity, payload_data


class ActivitiesMixin(InstanceState):
    """Scheduling, cancelling and resolving activities."""

    # --- resolutions ----------------------------------------------------------------

    def _resolve_activity(self, job: workflow_task_pb2.ResolveActivityJob) -> None:
        pending = self._activities.pop(job.seq, None)
        if pending is None:
            if job.seq in self._abandoned:
                self._abandoned.discard(job.seq)
                return
            raise WorkflowTaskError(f"resolution for unknown activity seq {job.seq}")
        if pending.future.done():
            return
        if job.cancelled:
            message = f"activity {pending.activity_type!r} (seq {job.seq}) was cancelled"
            pending.future.set_exception(asyncio.CancelledError(message))
            return
        outcome = job.WhichOneof("outcome")
        if outcome == "completed":
            try:
                value = converter.decode(payload_data(job.completed), pending.result_hint)
            except payload.PayloadError as exc:
                pending.future.set_exception(exc)
            else:
                pending.future.set_result(value)
            return
        pending.future.set_exception(self._activity_error(job, pending.activity_type))

    def _activity_error(
        self, job: workflow_task_pb2.ResolveActivityJob, activity_type: str
    ) -> ActivityError:
        cause = application_error_from_failure(job.failed)
        if job.ambiguous:
            details: Sequence[Any] = ()
            if job.failed.details.data:
                decoded = payload.decode(job.failed.details.data)
                details = decoded if isinstance(decoded, list) else [decoded]
            return AmbiguousEffectError(
                f"activity {activity_type!r} (seq {job.seq}, attempt {job.attempt}) has an "
                f"ambiguous outcome: {job.failed.message}",
                seq=job.seq,
                activity_type=activity_type,
                attempt=job.attempt,
                cause=cause,
                details=details,
            )
        return ActivityError(
            f"activity {activity_type!r} (seq {job.seq}) failed: "
            f"{job.failed.type}: {job.failed.message}",
            seq=job.seq,
            activity_type=activity_type,
            attempt=job.attempt,
            cause=cause,
        )

    # --- commands (called by the workflow API) ---------------------------------------

    def schedule_activity(
        self,
        activity_type: str,
        input_data: bytes,
        *,
        task_queue: str,
        options: options_pb2.ActivityOptions,
        result_hint: Any,
    ) -> tuple[int, asyncio.Future[Any]]:
        seq = self._take_seq()
        future: asyncio.Future[Any] = self.loop.create_future()
        self._activities[seq] = PendingActivity(future, activity_type, result_hint)
        self._emit(
            workflow_task_pb2.Command(
                seq=seq,
                schedule_activity=workflow_task_pb2.ScheduleActivity(
                    activity_type=activity_type,
                    input=payload_pb2.Payload(data=input_data),
                    task_queue=task_queue,
                    options=options,
                ),
            )
        )
        return seq, future

    def abandon_activity(self, seq: int) -> None:
        """The awaiting code stopped waiting (its cancellation policy): the activity's
        eventual resolution is dropped."""
        if self._activities.pop(seq, None) is not None:
            self._abandoned.add(seq)

    def request_cancel_activity(self, seq: int) -> asyncio.Future[Any] | None:
        """The code awaiting activity ``seq`` was cancelled (which cancelled the future
        it awaited). While the activity has no outcome, emit RequestCancelActivity (it
        carries the activity's own seq, so it never shifts later seqs) and return a
        fresh future for the outcome: ActivityCancelled, or a result that arrived
        anyway. None when the activity already resolved, or when the run itself is
        being cancelled (the activity is then abandoned, as before activity
        cancellation existed)."""
        pending = self._activities.get(seq)
        if pending is None or (pending.future.done() and not pending.future.cancelled()):
            return None
        if self._run_cancelled:
            self.abandon_activity(seq)
            return None
        pending.future = self.loop.create_future()
        self._emit(
            workflow_task_pb2.Command(
                seq=seq,
                request_cancel_activity=workflow_task_pb2.RequestCancelActivity(activity_seq=seq),
            )
        )
        return pending.future
