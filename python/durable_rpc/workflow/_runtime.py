"""The workflow runtime: applies an activation's jobs and collects the commands.

One :class:`WorkflowInstance` per run execution. The replay machine (Rust) feeds it
activations; for each, the instance resolves the matching futures, runs the workflow's
coroutines on its :class:`~durable_rpc.workflow._loop.WorkflowLoop` until all are
blocked, and answers with the commands produced, in the order the code made them.

Errors split in two: anything the *workflow* raises ends the run (FailWorkflow);
anything wrong with the *task* (a runtime invariant, a forbidden operation, the
deadline) raises :class:`WorkflowTaskError` out of :meth:`activate`, so the worker fails
the workflow task and the run stays open.

The instance is put together from parts, one module each, all built on the state in
:mod:`~durable_rpc.workflow._instance`: activities (``_activities``), local activities
(``_local_activities``), timers and wait conditions (``_timers``), signals
(``_signals``), updates (``_updates``), queries (``_queries``), side effects and patches
(``_markers``), cancellation and shields (``_cancellation``) and the end of the run
(``_completion``); child workflows are in ``_children``. This module keeps the
activation dispatch and the main coroutine, and re-exports what the worker and the
workflow API import from here.
"""

from __future__ import annotations

import hashlib
import random
from datetime import UTC
from typing import Any

from durable_rpc import converter
from durable_rpc.search_attributes import from_proto as sa_from_proto
from durable_rpc.search_attributes import memo_from_proto
from durable_rpc.v1 import workflow_task_pb2
from durable_rpc.workflow import _budgets, _children, _external, _sandbox, _streams
from durable_rpc.workflow._activities import ActivitiesMixin
from durable_rpc.workflow._cancellation import CancellationMixin
from durable_rpc.workflow._completion import CompletionMixin
from durable_rpc.workflow._errors import WorkflowTaskError
from durable_rpc.workflow._group_markers import SELECTION_WINNER_MARKER, GroupsMixin
from durable_rpc.workflow._local_activities import LocalActivitiesMixin
from durable_rpc.workflow._markers import (
    LOCAL_ACTIVITY_FAILED,
    LOCAL_ACTIVITY_MARKER,
    PATCH_MARKER,
    SIDE_EFFECT_MARKER,
    VERSION_MARKER,
    MarkersMixin,
)
from durable_rpc.workflow._queries import QueriesMixin, QueryError
from durable_rpc.workflow._signal_handler import SignalHandler
from durable_rpc.workflow._signals import SignalsMixin
from durable_rpc.workflow._timers import TimersMixin
from durable_rpc.workflow._updates import UnknownUpdateError, UpdatesMixin
from durable_rpc.workflow._values import (
    LocalActivityOutcome,
    LocalActivityRequest,
    WorkflowInfo,
    payload_data,
)

__all__ = [
    "LOCAL_ACTIVITY_FAILED",
    "LOCAL_ACTIVITY_MARKER",
    "PATCH_MARKER",
    "SIDE_EFFECT_MARKER",
    "VERSION_MARKER",
    "LocalActivityOutcome",
    "LocalActivityRequest",
    "QueryError",
    "UnknownUpdateError",
    "WorkflowInfo",
    "WorkflowInstance",
    "payload_data",
]


#: Activation jobs that resolve the call of their ``seq``.
_SEQ_JOBS = frozenset(
    {
        "resolve_activity",
        "fire_timer",
        "resolve_child_workflow_start",
        "resolve_child_workflow",
        "resolve_signal_external",
        "resolve_budget",
        "resolve_stream_read",
    }
)


class WorkflowInstance(
    ActivitiesMixin,
    CancellationMixin,
    LocalActivitiesMixin,
    TimersMixin,
    SignalsMixin,
    UpdatesMixin,
    MarkersMixin,
    GroupsMixin,
    QueriesMixin,
    CompletionMixin,
):
    """Runs one workflow execution, activation by activation."""

    # --- activation -----------------------------------------------------------------

    def activate(
        self, activation: workflow_task_pb2.Activation
    ) -> workflow_task_pb2.ActivationCompletion:
        """Apply ``activation``'s jobs, run until blocked, return the commands produced."""
        self._commands = []
        if self._finished:
            # The run already produced its terminal command; nothing more can happen.
            return workflow_task_pb2.ActivationCompletion()
        self.is_replaying = activation.is_replaying
        self.history_seen = (activation.history_length, activation.history_size_bytes)
        self._recorded_side_effects = {}
        self._recorded_patches = set()
        self._recorded_versions = {}
        self._recorded_locals = {}
        self._recorded_winners = {}
        self._activation_no += 1
        self._activation_jobs = len(activation.jobs)
        self._resolved_at = {}
        for marker in activation.markers:
            if marker.kind == SIDE_EFFECT_MARKER:
                self._recorded_side_effects[marker.seq] = payload_data(marker.payload)
            elif marker.kind == PATCH_MARKER:
                self._recorded_patches.add(marker.id)
            elif marker.kind == VERSION_MARKER:
                self._recorded_versions[marker.id] = payload_data(marker.payload)
            elif marker.kind == LOCAL_ACTIVITY_MARKER:
                self._recorded_locals[marker.seq] = (marker.id, payload_data(marker.payload))
            elif marker.kind == SELECTION_WINNER_MARKER:
                self._recorded_winners[marker.seq] = payload_data(marker.payload)
        if activation.HasField("timestamp"):
            self._now = activation.timestamp.ToDatetime(tzinfo=UTC)
            self.loop.set_time(activation.timestamp.ToNanoseconds() / 1e9)
        self.loop.clock_unknown = self.clock_unknown_when_live and not self.is_replaying
        with self.loop.running(), _sandbox.restricted():
            start: workflow_task_pb2.StartWorkflowJob | None = None
            cancel: workflow_task_pb2.CancelWorkflowJob | None = None
            updates: list[workflow_task_pb2.DoUpdateJob] = []
            for index, job in enumerate(activation.jobs):
                kind = job.WhichOneof("job")
                if kind == "start_workflow":
                    start = job.start_workflow
                    self._instantiate(start)
                elif kind == "cancel_workflow":
                    cancel = job.cancel_workflow
                elif kind == "do_update":
                    updates.append(job.do_update)
                elif kind == "signal_workflow":
                    # The bulk of a long run's jobs: dispatched here, without _apply.
                    signal = job.signal_workflow
                    self._signal(signal.signal_name, payload_data(signal.input))
                else:
                    if kind in _SEQ_JOBS:
                        # History order of the resolutions, for selections (_members).
                        self._resolved_at[getattr(job, kind).seq] = index
                    self._apply(job)
            # The main coroutine is scheduled after the other jobs, so signals delivered
            # with the start (signal-with-start) reach their handlers before it runs.
            if start is not None:
                self._start_main(start)
            # Updates after every other job (the replay machine orders them so too).
            for update in updates:
                self._do_update(update)
            if cancel is not None:
                self._cancel(cancel)
            self._run()
            self._sync_signals = None  # ran: a kept instance need not hold its signals
            if self.is_replaying:
                self._replay_local_activities()
        self._finish_if_done()
        return workflow_task_pb2.ActivationCompletion(commands=self._commands)

    def _apply(self, job: workflow_task_pb2.ActivationJob) -> None:
        kind = job.WhichOneof("job")
        if kind == "resolve_activity":
            self._resolve_activity(job.resolve_activity)
        elif kind == "fire_timer":
            self._fire_timer(job.fire_timer.seq)
        elif kind == "resolve_child_workflow_start":
            try:
                _children.resolve_start(self._children, job.resolve_child_workflow_start)
            except LookupError as exc:
                raise WorkflowTaskError(str(exc)) from None
        elif kind == "resolve_child_workflow":
            try:
                _children.resolve_result(self._children, job.resolve_child_workflow)
            except LookupError as exc:
                raise WorkflowTaskError(str(exc)) from None
        elif kind == "resolve_signal_external":
            try:
                _external.resolve(self._signals_sent, job.resolve_signal_external)
            except LookupError as exc:
                raise WorkflowTaskError(str(exc)) from None
        elif kind == "resolve_budget":
            try:
                _budgets.resolve(self, job.resolve_budget)
            except LookupError as exc:
                raise WorkflowTaskError(str(exc)) from None
        elif kind == "resolve_stream_read":
            try:
                _streams.resolve(self, job.resolve_stream_read)
            except LookupError as exc:
                raise WorkflowTaskError(str(exc)) from None
        elif kind == "signal_workflow":
            self._signal(job.signal_workflow.signal_name, payload_data(job.signal_workflow.input))
        else:
            raise WorkflowTaskError(f"unknown activation job {kind!r} (event {job.event_id})")

    def _instantiate(self, start: workflow_task_pb2.StartWorkflowJob) -> None:
        if self.info is not None:
            raise WorkflowTaskError("a second start_workflow job for the same run")
        self.info = WorkflowInfo(
            workflow_id=start.workflow_id,
            run_id=start.run_id,
            workflow_type=start.workflow_type,
            workflow_version=start.workflow_version or self.definition.version,
            task_queue=self.task_queue,
            is_replaying=self.is_replaying,
            memo=memo_from_proto(start.memo),
            search_attributes=sa_from_proto(start.search_attributes),
            continued_from_run_id=start.continued_from_run_id,
        )
        # A redriven run replays decisions another run made: it draws what they drew.
        seed = hashlib.sha256((start.random_seed_run_id or start.run_id).encode()).digest()
        self.random = random.Random(int.from_bytes(seed[:16], "big"))
        try:
            self._obj = self.definition.cls()
        except Exception as exc:
            # A failing constructor is workflow code failing: it ends the run.
            self._obj = exc
            return
        for name, signal in self.definition.signals.items():
            self._handlers[name] = SignalHandler.of(
                signal.method.__get__(self._obj), signal.arg_hints
            )

    def _start_main(self, start: workflow_task_pb2.StartWorkflowJob) -> None:
        obj = self._obj
        data = payload_data(start.input)

        async def main() -> Any:
            if isinstance(obj, Exception):
                raise obj
            # Decoding inside the coroutine: bad input fails the workflow, not the task.
            args = converter.decode_args(data, self.definition.arg_hints)
            return await self.definition.run(obj, *args)

        self._main = self.loop.create_task(main(), name=f"workflow:{self.definition.name}")
        for name in list(self._buffered_signals):
            if name in self._handlers:
                self._drain_signals(name)
