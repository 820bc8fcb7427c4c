"""Local activities, as the runtime sees them: the workflow waits on a future that the
worker resolves after running the function during the workflow task (live), or that
the task's local_activity marker resolves (replay)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from durable_rpc import converter, payload
from durable_rpc.activity._failure import application_error_from_failure
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from durable_rpc.workflow import _sandbox
from durable_rpc.workflow._completion import CompletionMixin
from durable_rpc.workflow._errors import ActivityError, WorkflowTaskError
from durable_rpc.workflow._markers import (
    LOCAL_ACTIVITY_FAILED,
    LOCAL_ACTIVITY_MARKER,
    marker_command,
)
from durable_rpc.workflow._timers import TimersMixin
from durable_rpc.workflow._values import LocalActivityOutcome, LocalActivityRequest


class LocalActivitiesMixin(TimersMixin, CompletionMixin):
    """Local activities: waiting, running (live) or replaying, and resolving them."""

    def schedule_local_activity(
        self, request: Callable[[int], LocalActivityRequest], result_hint: Any
    ) -> asyncio.Future[Any]:
        """Take the next seq for a local activity; it runs (live) or is answered from
        its recorded marker (replay) once the workflow's coroutines are all blocked."""
        self._refuse_in_query()
        seq = self._take_seq()
        future: asyncio.Future[Any] = self.loop.create_future()
        self._local[seq] = (request(seq), future, result_hint)
        return future

    def pending_local_activities(self) -> list[LocalActivityRequest]:
        """The local activities the live workflow waits for, in seq order."""
        if self._finished:
            return []
        return [self._local[seq][0] for seq in sorted(self._local)]

    def resolve_local_activities(
        self, outcomes: Sequence[LocalActivityOutcome]
    ) -> list[workflow_task_pb2.Command]:
        """A follow-up activation within the same workflow task: record each outcome
        (a local_activity marker), resolve the waiting code, run until blocked again.
        Returns the commands this produced."""
        self._commands = []
        if self._finished:
            return []
        with self.loop.running(), _sandbox.restricted():
            for outcome in sorted(outcomes, key=lambda o: o.seq):
                self._resolve_local(outcome.seq, outcome.marker_id, outcome.data, outcome.attempts)
            self._run()
        self._finish_if_done()
        return list(self._commands)

    def _replay_local_activities(self) -> None:
        """Replay: answer waiting local activities from the task's markers, in the
        rounds the live task ran them, so commands come out in the recorded order."""
        while self._local and not self._finished:
            seqs = sorted(self._local)
            for seq in seqs:
                recorded = self._recorded_locals.get(seq)
                if recorded is None:
                    # Not recorded by this task: the code changed. Emit the marker so the
                    # replay machine names the divergence; never run the function.
                    self._emit(marker_command(seq, LOCAL_ACTIVITY_MARKER, "", None))
                    return
                self._resolve_local(seq, *recorded)
            self._run()

    def _resolve_local(self, seq: int, marker_id: str, data: bytes, attempts: bytes = b"") -> None:
        entry = self._local.pop(seq, None)
        if entry is None:
            raise WorkflowTaskError(f"outcome for unknown local activity seq {seq}")
        request, future, hint = entry
        # The attempt log rides along live only: it is not part of the marker's identity.
        self._emit(marker_command(seq, LOCAL_ACTIVITY_MARKER, marker_id, data, attempts))
        if future.done():
            return
        if marker_id == LOCAL_ACTIVITY_FAILED:
            type_, message, attempt = converter.decode(data, tuple[str, str, int])
            failure = payload_pb2.Failure(type=type_, message=message)
            future.set_exception(
                ActivityError(
                    f"local activity {request.name!r} (seq {seq}) failed: {type_}: {message}",
                    seq=seq,
                    activity_type=request.name,
                    attempt=attempt,
                    cause=application_error_from_failure(failure),
                )
            )
            return
        try:
            future.set_result(converter.decode(data, hint))
        except payload.PayloadError as exc:
            future.set_exception(exc)
