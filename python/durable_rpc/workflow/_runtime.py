"""The workflow runtime: applies an activation's jobs and collects the commands.

One :class:`WorkflowInstance` per run execution. The replay machine (Rust) feeds it
activations; for each, the instance resolves the matching futures, runs the workflow's
coroutines on its :class:`~durable_rpc.workflow._loop.WorkflowLoop` until all are
blocked, and answers with the commands produced, in the order the code made them.

Errors split in two: anything the *workflow* raises ends the run (FailWorkflow);
anything wrong with the *task* (a runtime invariant, a forbidden operation, the
deadline) raises :class:`WorkflowTaskError` out of :meth:`activate`, so the worker fails
the workflow task and the run stays open.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from durable_rpc import converter, payload
from durable_rpc.activity._failure import application_error_from_failure, failure_from_exception
from durable_rpc.converter import arg_and_result_hints
from durable_rpc.search_attributes import from_proto as sa_from_proto
from durable_rpc.search_attributes import memo_from_proto
from durable_rpc.search_attributes import to_proto as sa_to_proto
from durable_rpc.v1 import options_pb2, payload_pb2, workflow_task_pb2
from durable_rpc.workflow import _children, _sandbox
from durable_rpc.workflow._definition import UpdateDefinition, WorkflowDefinition
from durable_rpc.workflow._errors import (
    ActivityError,
    AmbiguousEffectError,
    ContinueAsNewError,
    RestrictedOperationError,
    WorkflowTaskError,
)
from durable_rpc.workflow._loop import WorkflowLoop, new_loop

log = logging.getLogger("durable_rpc.workflow")


@dataclass(frozen=True)
class WorkflowInfo:
    """The identity of the running workflow, as seen by its code."""

    workflow_id: str
    run_id: str
    workflow_type: str
    workflow_version: str
    task_queue: str
    is_replaying: bool
    #: Set at start (memo) and at start or by upsert_search_attributes (search attributes).
    memo: dict[str, Any] = field(default_factory=dict)
    search_attributes: dict[str, Any] = field(default_factory=dict)
    #: The run this one continues (continue-as-new); empty for a run a client started.
    continued_from_run_id: str = ""


@dataclass
class _PendingActivity:
    future: asyncio.Future[Any]
    activity_type: str
    result_hint: Any


def payload_data(p: payload_pb2.Payload) -> bytes:
    """The inline frame of ``p``; the server inlines external payloads for workers."""
    if not p.data and p.HasField("external"):
        raise WorkflowTaskError("received an external payload reference without its data")
    return p.data


#: Marker kinds (MarkerRecorded.kind / RecordMarker.kind).
SIDE_EFFECT_MARKER = "side_effect"
PATCH_MARKER = "patch"
LOCAL_ACTIVITY_MARKER = "local_activity"
# Marker id of a local activity that failed for good (its payload is the failure).
LOCAL_ACTIVITY_FAILED = "failed"


@dataclass(frozen=True)
class LocalActivityRequest:
    """A local activity the workflow is waiting for: the worker runs it during the
    workflow task and hands the outcome back with ``resolve_local_activities``."""

    seq: int
    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    start_to_close_timeout: float | None
    retry_policy: Any


@dataclass(frozen=True)
class LocalActivityOutcome:
    """``marker_id`` "" = completed (``data`` the encoded value); "failed" = failed
    for good (``data`` the encoded ``[type, message, attempt]``)."""

    seq: int
    marker_id: str
    data: bytes


class _ReplayDivergedError(BaseException):
    """Stops workflow code that, during replay, reached a side effect its history did
    not record. A BaseException so ``except Exception`` in workflow code cannot swallow
    it; the marker command was emitted first, so the replay machine reports the
    divergence as a NondeterminismError (seq, expected, actual)."""


class WorkflowInstance:
    """Runs one workflow execution, activation by activation."""

    def __init__(
        self, definition: WorkflowDefinition, *, task_queue: str, deadline: float | None = None
    ) -> None:
        self.definition = definition
        self.task_queue = task_queue
        # Absolute time.monotonic() after which a still-running activation fails the task.
        self.deadline = deadline
        self.loop: WorkflowLoop = new_loop(self)
        self._now = datetime.fromtimestamp(0, UTC)
        # Set for a workflow task decided inline with an activity completion: its clock
        # is the database time of the commit that records it, unknown while the code
        # runs. Reading it then marks the decision unusable (see worker/_inline.py).
        self.clock_unknown_when_live = False
        self.is_replaying = False
        self.random = random.Random(0)
        self.info: WorkflowInfo | None = None
        self._commands: list[workflow_task_pb2.Command] = []
        self._next_seq = 1
        self._activities: dict[int, _PendingActivity] = {}
        self._timers: dict[int, asyncio.Future[None]] = {}
        self._children: dict[int, _children.PendingChild] = {}
        # Seqs whose awaiting code was cancelled: their late resolutions are expected.
        self._abandoned: set[int] = set()
        # Local activities waiting for their outcome, by seq (request, future, hint).
        self._local: dict[int, tuple[LocalActivityRequest, asyncio.Future[Any], Any]] = {}
        # Local-activity markers of the replayed task, by seq: (marker id, payload).
        self._recorded_locals: dict[int, tuple[str, bytes]] = {}
        # Set once the run's cancellation was delivered: activities awaited by the
        # cancelled code are then abandoned without a RequestCancelActivity command (the
        # server already asked every task of the run to stop; histories recorded before
        # activity cancellation existed replay unchanged).
        self._run_cancelled = False
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._obj: Any = None
        self._main: asyncio.Task[Any] | None = None
        self._handlers: dict[str, Callable[..., Any]] = {}
        self._buffered_signals: dict[str, list[bytes]] = {}
        self._handler_error: BaseException | None = None
        self._finished = False
        # Markers recorded by the task the current activation replays (empty when live).
        self._recorded_side_effects: dict[int, bytes] = {}
        self._recorded_patches: set[str] = set()
        # patched() decisions of this run, by change id: one marker and one answer each.
        self._patches: dict[str, bool] = {}
        # Set while a query handler runs: producing a command then fails the query.
        self._querying: str | None = None
        # Updates accepted by this run (recorded or live), by id: delivered once each.
        self._updates_seen: set[str] = set()
        #: Live updates the validator rejected, in delivery order: (update_id, failure).
        #: Never recorded in history; the worker reports them beside the commands.
        self.rejected_updates: list[tuple[str, payload_pb2.Failure]] = []
        _sandbox.install()

    @property
    def now(self) -> datetime:
        """The workflow clock of the current activation."""
        return (
            datetime.fromtimestamp(self.loop.time(), UTC) if self.loop.clock_unknown else self._now
        )

    @property
    def read_unknown_clock(self) -> bool:
        """Whether live code read the clock while it was unknown."""
        return self.loop.clock_read_while_unknown

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
        self._recorded_side_effects = {}
        self._recorded_patches = set()
        self._recorded_locals = {}
        for marker in activation.markers:
            if marker.kind == SIDE_EFFECT_MARKER:
                self._recorded_side_effects[marker.seq] = payload_data(marker.payload)
            elif marker.kind == PATCH_MARKER:
                self._recorded_patches.add(marker.id)
            elif marker.kind == LOCAL_ACTIVITY_MARKER:
                self._recorded_locals[marker.seq] = (marker.id, payload_data(marker.payload))
        if activation.HasField("timestamp"):
            self._now = activation.timestamp.ToDatetime(tzinfo=UTC)
            self.loop.set_time(activation.timestamp.ToNanoseconds() / 1e9)
        self.loop.clock_unknown = self.clock_unknown_when_live and not self.is_replaying
        with self.loop.running(), _sandbox.restricted():
            start: workflow_task_pb2.StartWorkflowJob | None = None
            cancel_reason: str | None = None
            updates: list[workflow_task_pb2.DoUpdateJob] = []
            for job in activation.jobs:
                kind = job.WhichOneof("job")
                if kind == "start_workflow":
                    start = job.start_workflow
                    self._instantiate(start)
                elif kind == "cancel_workflow":
                    cancel_reason = job.cancel_workflow.reason
                elif kind == "do_update":
                    updates.append(job.do_update)
                else:
                    self._apply(job)
            # The main coroutine is scheduled after the other jobs, so signals delivered
            # with the start (signal-with-start) reach their handlers before it runs.
            if start is not None:
                self._start_main(start)
            # Updates after every other job (the replay machine orders them so too).
            for update in updates:
                self._do_update(update)
            if cancel_reason is not None:
                self._cancel(cancel_reason)
            self._run()
            if self.is_replaying:
                self._replay_local_activities()
        self._finish_if_done()
        return workflow_task_pb2.ActivationCompletion(commands=self._commands)

    # --- local activities -------------------------------------------------------------

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
                self._resolve_local(outcome.seq, outcome.marker_id, outcome.data)
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
                    self._emit(_marker_command(seq, LOCAL_ACTIVITY_MARKER, "", None))
                    return
                self._resolve_local(seq, *recorded)
            self._run()

    def _resolve_local(self, seq: int, marker_id: str, data: bytes) -> None:
        entry = self._local.pop(seq, None)
        if entry is None:
            raise WorkflowTaskError(f"outcome for unknown local activity seq {seq}")
        request, future, hint = entry
        self._emit(_marker_command(seq, LOCAL_ACTIVITY_MARKER, marker_id, data))
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

    def _run(self) -> None:
        while True:
            self.loop.run_until_blocked(self.deadline)
            if not self._check_conditions():
                return

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
        seed = hashlib.sha256(start.run_id.encode()).digest()
        self.random = random.Random(int.from_bytes(seed[:16], "big"))
        try:
            self._obj = self.definition.cls()
        except Exception as exc:
            # A failing constructor is workflow code failing: it ends the run.
            self._obj = exc
            return
        for name, signal in self.definition.signals.items():
            self._handlers[name] = signal.method.__get__(self._obj)

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

    def _cancel(self, reason: str) -> None:
        self._run_cancelled = True
        if self._main is not None and not self._main.done():
            self._main.cancel(reason or None)

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

    def _fire_timer(self, seq: int) -> None:
        future = self._timers.pop(seq, None)
        if future is None:
            if seq in self._abandoned:
                self._abandoned.discard(seq)
                return
            raise WorkflowTaskError(f"fired timer for unknown seq {seq}")
        if not future.done():
            future.set_result(None)

    # --- signals --------------------------------------------------------------------

    def _signal(self, name: str, data: bytes) -> None:
        if name not in self._handlers:
            # Not an error: the handler may be registered later (set_signal_handler), or
            # the sender is ahead of this code. Keep it, in arrival order.
            if not self.is_replaying:
                log.warning("signal %r has no handler yet; buffered", name)
            self._buffered_signals.setdefault(name, []).append(data)
            return
        self._deliver(name, data)

    def _deliver(self, name: str, data: bytes) -> None:
        handler = self._handlers[name]

        async def run_handler() -> None:
            hints, _ = _handler_hints(handler)
            result = handler(*converter.decode_args(data, hints))
            if asyncio.iscoroutine(result):
                await result

        task = self.loop.create_task(run_handler(), name=f"signal:{name}")
        task.add_done_callback(self._on_handler_done)

    def _on_handler_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        # A failing signal handler fails the run, like a failing main method.
        self._handler_error = self._handler_error or task.exception()

    def _drain_signals(self, name: str) -> None:
        for data in self._buffered_signals.pop(name, []):
            self._deliver(name, data)

    def set_signal_handler(self, name: str, handler: Callable[..., Any] | None) -> None:
        if handler is None:
            self._handlers.pop(name, None)
            return
        self._handlers[name] = handler
        if self._main is not None:
            self._drain_signals(name)

    # --- updates --------------------------------------------------------------------

    def _do_update(self, job: workflow_task_pb2.DoUpdateJob) -> None:
        """Validate (live only) and accept update ``job``, then start its handler.

        A replayed job comes from a recorded UpdateAccepted: the validator already
        accepted it, so only the handler runs. A live job the validator rejects is kept
        in :attr:`rejected_updates` and produces no command."""
        update_id = job.update_id
        if update_id in self._updates_seen:
            return  # already accepted by this run: the handler never runs twice
        definition = self.definition.updates.get(job.update_name)
        data = payload_data(job.input)
        if job.validate:
            rejection = self._validate_update(job.update_name, definition, data)
            if rejection is not None:
                if not self.is_replaying:
                    log.info("update %r (%s) rejected: %r", job.update_name, update_id, rejection)
                self.rejected_updates.append((update_id, failure_from_exception(rejection)))
                return
        if definition is None:
            # Recorded but no longer handled: emit nothing, so the replay machine names
            # the divergence (expected AcceptUpdate, got nothing).
            return
        self._updates_seen.add(update_id)
        self._emit(
            workflow_task_pb2.Command(
                accept_update=workflow_task_pb2.AcceptUpdate(
                    update_id=update_id,
                    update_name=job.update_name,
                    input=payload_pb2.Payload(data=data),
                )
            )
        )
        handler = definition.method.__get__(self._obj)

        async def run_update() -> Any:
            args = converter.decode_args(data, definition.arg_hints)
            result = handler(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        task = self.loop.create_task(run_update(), name=f"update:{job.update_name}")
        task.add_done_callback(lambda done: self._on_update_done(update_id, done))

    def _validate_update(
        self, name: str, definition: UpdateDefinition | None, data: bytes
    ) -> Exception | None:
        """Why the update must be rejected (None: accept it)."""
        if definition is None:
            known = ", ".join(sorted(self.definition.updates)) or "none"
            return UnknownUpdateError(
                f"workflow {self.definition.name!r} has no update {name!r} (known: {known})"
            )
        if self.info is None or self._obj is None or isinstance(self._obj, Exception):
            return UnknownUpdateError("the workflow has not started: it cannot take updates")
        if self._finished:
            return UnknownUpdateError("the workflow already finished: it cannot take updates")
        try:
            args = converter.decode_args(data, definition.arg_hints)
        except Exception as exc:
            return exc
        if definition.validator is None:
            return None
        validator = definition.validator.__get__(self._obj)
        # A validator only reads state: producing a command rejects the update.
        self._querying = f"validator of update {name!r}"
        try:
            result = validator(*args)
            if asyncio.iscoroutine(result):
                result.close()
                return RestrictedOperationError(f"the validator of update {name!r} is async")
        except Exception as exc:
            return exc
        finally:
            self._querying = None
        return None

    def _on_update_done(self, update_id: str, task: asyncio.Task[Any]) -> None:
        outcome = workflow_task_pb2.CompleteUpdate(update_id=update_id)
        if task.cancelled():
            outcome.failure.CopyFrom(failure_from_exception(asyncio.CancelledError()))
        elif (error := task.exception()) is not None:
            outcome.failure.CopyFrom(failure_from_exception(error))
        else:
            try:
                outcome.result.data = converter.encode(task.result())
            except payload.PayloadError as exc:
                outcome.failure.CopyFrom(failure_from_exception(exc))
        self._emit(workflow_task_pb2.Command(complete_update=outcome))

    # --- commands (called by the workflow API) ---------------------------------------

    def _take_seq(self) -> int:
        self._refuse_in_query()
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _emit(self, command: workflow_task_pb2.Command) -> None:
        self._refuse_in_query()
        if self._finished:
            return
        self._commands.append(command)

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
        self._activities[seq] = _PendingActivity(future, activity_type, result_hint)
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

    def upsert_search_attributes(self, values: Mapping[str, Any]) -> None:
        """Record an UpsertSearchAttributes command; info() sees the values at once."""
        attrs = sa_to_proto(values)
        if self.info is not None:
            self.info.search_attributes.update(sa_from_proto(attrs))
        self._emit(
            workflow_task_pb2.Command(
                upsert_search_attributes=workflow_task_pb2.UpsertSearchAttributes(
                    search_attributes=attrs
                )
            )
        )

    def abandon_activity(self, seq: int) -> None:
        """The awaiting code was cancelled; there is no command to cancel an activity,
        so its eventual resolution is dropped."""
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

    def start_timer(self, seconds_nanos: tuple[int, int]) -> tuple[int, asyncio.Future[None]]:
        seq = self._take_seq()
        future: asyncio.Future[None] = self.loop.create_future()
        self._timers[seq] = future
        command = workflow_task_pb2.Command(seq=seq)
        command.start_timer.duration.seconds, command.start_timer.duration.nanos = seconds_nanos
        self._emit(command)
        return seq, future

    def cancel_timer(self, seq: int) -> None:
        """Cancel a timer that has not fired. The command carries the timer's own seq
        (it is the same call), so cancelling never shifts later seqs."""
        if self._timers.pop(seq, None) is None:
            return
        self._abandoned.add(seq)
        self._emit(
            workflow_task_pb2.Command(
                seq=seq, cancel_timer=workflow_task_pb2.CancelTimer(timer_seq=seq)
            )
        )

    def side_effect(self, fn: Callable[[], Any], result_hint: Any) -> Any:
        """Run ``fn`` once and record its value (a marker taking the next seq); during
        replay return the recorded value without calling ``fn``.

        ``fn`` raising, returning an awaitable or returning something the converter
        cannot encode fails the workflow *task* (the run stays open and the task is
        retried): recording nothing while the code carries on would make the next replay
        diverge."""
        seq = self._take_seq()
        if self.is_replaying:
            data = self._recorded_side_effects.get(seq)
            if data is None:
                # The replayed task recorded no side effect at this seq: the code
                # changed. Never call fn for a replay that cannot match; emit the marker
                # so the replay machine names the divergence, and stop this coroutine.
                self._emit(_marker_command(seq, SIDE_EFFECT_MARKER, "", None))
                raise _ReplayDivergedError(f"side effect seq {seq} is not in the history")
            # Matched against the recorded marker (kind, seq, id) by the replay machine.
            self._emit(_marker_command(seq, SIDE_EFFECT_MARKER, "", data))
        else:
            try:
                # fn may do what workflow code may not (read the clock, draw a uuid):
                # its value is recorded and never recomputed.
                with _sandbox.unrestricted():
                    value = fn()
                if inspect.isawaitable(value):
                    if inspect.iscoroutine(value):
                        value.close()
                    raise TypeError("side_effect takes a synchronous function")
                data = converter.encode(value)
            except Exception as exc:
                error = WorkflowTaskError(
                    f"side_effect function {getattr(fn, '__qualname__', fn)!r} (seq {seq}) "
                    f"failed: {exc!r}; nothing was recorded, the workflow task fails"
                )
                self.loop.violation = self.loop.violation or error
                raise error from exc
            self._emit(_marker_command(seq, SIDE_EFFECT_MARKER, "", data))
        # Decoded on first execution too, so both return exactly the same value.
        return converter.decode(data, result_hint)

    def patch(self, change_id: str) -> bool:
        """Whether the run takes the patched branch of ``change_id``.

        Live code records one patch marker per change id and takes the new branch.
        During replay the answer is whether the replayed task recorded the marker
        (an old history without it takes the old branch and emits nothing). The first
        answer holds for the rest of the run. Patch markers take no seq, so adding a
        patched() call never shifts the seqs of later commands."""
        if not change_id:
            raise ValueError("change_id must not be empty")
        decided = self._patches.get(change_id)
        if decided is not None:
            return decided
        use_patch = not self.is_replaying or change_id in self._recorded_patches
        self._patches[change_id] = use_patch
        if use_patch:
            self._emit(_marker_command(0, PATCH_MARKER, change_id, None))
        return use_patch

    def wait_condition(self, predicate: Callable[[], bool]) -> asyncio.Future[None]:
        self._refuse_in_query()
        future: asyncio.Future[None] = self.loop.create_future()
        self._conditions.append((predicate, future))
        return future

    def _check_conditions(self) -> bool:
        """Resolve the conditions that became true; True if any did (so run again)."""
        resolved = False
        for entry in list(self._conditions):
            predicate, future = entry
            if future.done():
                self._conditions.remove(entry)
                continue
            try:
                ready = predicate()
            except Exception as exc:
                future.set_exception(exc)
                ready = True
            else:
                if ready:
                    future.set_result(None)
            if ready:
                self._conditions.remove(entry)
                resolved = True
        return resolved

    # --- the end of the run ---------------------------------------------------------

    def _finish_if_done(self) -> None:
        if self._finished:
            return
        if self._handler_error is not None:
            self._fail(self._handler_error)
            return
        main = self._main
        if main is None or not main.done():
            return
        if main.cancelled():
            self._terminal(
                workflow_task_pb2.Command(cancel_workflow=workflow_task_pb2.CancelWorkflow())
            )
            return
        error = main.exception()
        if isinstance(error, ContinueAsNewError):
            self._continue_as_new(error)
            return
        if error is not None:
            self._fail(error)
            return
        try:
            result = converter.encode(main.result())
        except payload.PayloadError as exc:
            self._fail(exc)
            return
        self._terminal(
            workflow_task_pb2.Command(
                complete_workflow=workflow_task_pb2.CompleteWorkflow(
                    result=payload_pb2.Payload(data=result)
                )
            )
        )

    def _continue_as_new(self, request: ContinueAsNewError) -> None:
        try:
            data = converter.encode_args(request.new_args)
        except payload.PayloadError as exc:
            self._fail(exc)
            return
        self._terminal(
            workflow_task_pb2.Command(
                continue_as_new=workflow_task_pb2.ContinueAsNew(
                    input=payload_pb2.Payload(data=data)
                )
            )
        )

    def _fail(self, error: BaseException) -> None:
        if not self.is_replaying:
            log.info("workflow failed: %r", error)
        self._terminal(
            workflow_task_pb2.Command(
                fail_workflow=workflow_task_pb2.FailWorkflow(failure=failure_from_exception(error))
            )
        )

    def _terminal(self, command: workflow_task_pb2.Command) -> None:
        self._emit(command)
        self._finished = True

    # --- queries --------------------------------------------------------------------

    def _refuse_in_query(self) -> None:
        if self._querying is not None:
            raise RestrictedOperationError(
                f"query {self._querying!r} tried to change the workflow (schedule an "
                "activity, start a timer, wait...): query handlers must only read state"
            )

    def query(self, name: str, input_data: bytes) -> bytes:
        """Call query ``name`` on the replayed instance; its encoded result.

        Raises :class:`QueryError` for anything that makes the query unanswerable (an
        unknown name, a handler that raised, awaited or tried to change the run). The
        instance is meant to be discarded afterwards: a query never produces commands.
        """
        definition = self.definition.queries.get(name)
        if definition is None:
            known = ", ".join(sorted(self.definition.queries)) or "none"
            raise QueryError(
                f"workflow {self.definition.name!r} has no query {name!r} (known: {known})",
                "QueryNotFound",
            )
        if self.info is None or self._obj is None:
            raise QueryError("the workflow has not started yet: nothing to query", "QueryError")
        if isinstance(self._obj, Exception):
            raise QueryError(f"the workflow constructor failed: {self._obj!r}", "QueryError")
        handler = definition.method.__get__(self._obj)
        self._querying = name
        try:
            with self.loop.running(), _sandbox.restricted():
                args = converter.decode_args(input_data, definition.arg_hints)
                result = handler(*args)
                if asyncio.iscoroutine(result):
                    result.close()
                    raise RestrictedOperationError(f"query {name!r} returned a coroutine")
                if self.loop.violation is not None:
                    raise self.loop.violation
            return converter.encode(result)
        except QueryError:
            raise
        except Exception as exc:
            raise QueryError(str(exc) or repr(exc), type(exc).__name__) from exc
        finally:
            self._querying = None

    def current_info(self) -> WorkflowInfo:
        if self.info is None:
            raise RuntimeError("the workflow has not started")
        if self.info.is_replaying == self.is_replaying:
            return self.info
        return WorkflowInfo(**{**self.info.__dict__, "is_replaying": self.is_replaying})


class UnknownUpdateError(Exception):
    """The update cannot be delivered (unknown name, run not started or finished)."""


class QueryError(Exception):
    """A query could not be answered; ``failure_type`` is reported to the caller."""

    def __init__(self, message: str, failure_type: str) -> None:
        super().__init__(message)
        self.failure_type = failure_type


def _marker_command(
    seq: int, kind: str, marker_id: str, data: bytes | None
) -> workflow_task_pb2.Command:
    marker = workflow_task_pb2.RecordMarker(kind=kind, id=marker_id)
    if data is not None:
        marker.payload.data = data
    return workflow_task_pb2.Command(seq=seq, record_marker=marker)


def _handler_hints(handler: Callable[..., Any]) -> tuple[tuple[Any, ...], Any]:
    # A bound method's function still lists ``self``; a plain function does not.
    func = getattr(handler, "__func__", None)
    if func is not None:
        return arg_and_result_hints(func)
    return arg_and_result_hints(handler, skip_self=False)
