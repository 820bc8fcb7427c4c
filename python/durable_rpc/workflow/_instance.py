"""The state of one workflow instance, and what every part of the runtime uses: the
seq counter, the command list and the guard that keeps query handlers read-only."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from durable_rpc.search_attributes import from_proto as sa_from_proto
from durable_rpc.search_attributes import memo_from_proto, memo_to_proto
from durable_rpc.search_attributes import to_proto as sa_to_proto
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from durable_rpc.workflow import _budgets, _children, _external, _members, _sandbox, _streams
from durable_rpc.workflow._definition import WorkflowDefinition
from durable_rpc.workflow._errors import RestrictedOperationError
from durable_rpc.workflow._loop import WorkflowLoop, new_loop
from durable_rpc.workflow._signal_handler import SignalHandler
from durable_rpc.workflow._values import (
    DEFAULT_HISTORY_WARN,
    CancellationRequest,
    LocalActivityRequest,
    PendingActivity,
    WorkflowInfo,
)

#: A signal waiting for its plain handler: (signal name, handler, encoded arguments).
QueuedSignal = tuple[str, SignalHandler, bytes]


class InstanceState:
    """The state of one workflow execution; the parts of
    :class:`~durable_rpc.workflow._runtime.WorkflowInstance` build on it."""

    def __init__(
        self,
        definition: WorkflowDefinition,
        *,
        task_queue: str,
        deadline: float | None = None,
        history_warn: tuple[int, int] = DEFAULT_HISTORY_WARN,
    ) -> None:
        self.definition = definition
        self.task_queue = task_queue
        # The server's warn marks (events, bytes) and the history the current
        # activation's task saw (events, bytes): workflow.info()'s history budget.
        self.history_warn = history_warn
        self.history_seen = (0, 0)
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
        self._activities: dict[int, PendingActivity] = {}
        self._timers: dict[int, asyncio.Future[None]] = {}
        self._children: dict[int, _children.PendingChild] = {}
        self._signals_sent: dict[int, _external.PendingSignal] = {}
        # Budget reservations entered and not released, by seq (granted or waiting).
        self._budgets: dict[int, _budgets.PendingReservation] = {}
        # Message streams: each name's cursor and buffer, and the reads on their way.
        self._streams: dict[str, _streams.StreamState] = {}
        self._stream_reads: dict[int, _streams.PendingRead] = {}
        # Seqs whose awaiting code was cancelled: their late resolutions are expected.
        self._abandoned: set[int] = set()
        # Local activities waiting for their outcome, by seq (request, future, hint).
        self._local: dict[int, tuple[LocalActivityRequest, asyncio.Future[Any], Any]] = {}
        # Local-activity markers of the replayed task, by seq: (marker id, payload).
        self._recorded_locals: dict[int, tuple[str, bytes]] = {}
        # Set once a cancellation request recorded before cooperative cancellation was
        # delivered: activities awaited by the cancelled code are then abandoned without
        # a RequestCancelActivity command (that server had asked every task of the run to
        # stop; such histories replay unchanged). See _cancellation.py.
        self._run_cancelled = False
        # The run's cancellation request (workflow.cancellation()), the open
        # workflow.shield() blocks, and whether the request waits for them to close.
        self.cancellation_request: CancellationRequest | None = None
        self._shields = 0
        self._cancel_deferred = False
        self._conditions: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._obj: Any = None
        self._main: asyncio.Task[Any] | None = None
        self._handlers: dict[str, SignalHandler] = {}
        self._buffered_signals: dict[str, list[bytes]] = {}
        # The callback running the plain signal handlers queued last, and their signals
        # (see _signals.py): one more delivered right behind them joins it.
        self._sync_signals: tuple[asyncio.Handle, list[QueuedSignal]] | None = None
        self._handler_error: BaseException | None = None
        self._finished = False
        # Markers recorded by the task the current activation replays (empty when live).
        self._recorded_side_effects: dict[int, bytes] = {}
        self._recorded_patches: set[str] = set()
        # patched() decisions of this run, by change id: one marker and one answer each.
        self._patches: dict[str, bool] = {}
        # Version markers of the replayed task (change id -> payload), and the
        # get_version() decisions of this run: one marker and one answer per change id.
        self._recorded_versions: dict[str, bytes] = {}
        self._versions: dict[str, int] = {}
        # Selection winner markers of the replayed task, by seq (payload: the key).
        self._recorded_winners: dict[int, bytes] = {}
        # Where in history the current activation is: its number (1, 2, ...), how many
        # jobs it has, and the index of the job that resolved each seq it resolved
        # (a group member's end is ranked by these, see _members).
        self._activation_no = 0
        self._activation_jobs = 0
        self._resolved_at: dict[int, int] = {}
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

    # --- commands (called by the workflow API) ---------------------------------------

    def _take_seq(self) -> int:
        self._refuse_in_query()
        seq = self._next_seq
        self._next_seq += 1
        for member in _members.MEMBERS.get():
            member.seqs.add(seq)
        return seq

    def history_position(self, seqs: set[int]) -> tuple[int, int]:
        """Where in history something that waited on ``seqs`` ended: the current
        activation and the latest of its jobs that resolved one of them (after all of
        them when none did, e.g. a signal or a local activity woke it)."""
        at = [self._resolved_at[seq] for seq in seqs if seq in self._resolved_at]
        return self._activation_no, max(at) if at else self._activation_jobs

    def _emit(self, command: workflow_task_pb2.Command) -> None:
        self._refuse_in_query()
        if self._finished:
            return
        self._commands.append(command)

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

    def upsert_memo(self, values: Mapping[str, Any]) -> None:
        """Record an UpsertMemo command (a None value removes its key); info().memo sees
        the merged memo at once."""
        if not values:
            raise ValueError("upsert_memo needs at least one key")
        for key in values:
            if not isinstance(key, str) or not key:
                raise ValueError(f"memo keys must be non-empty strings, got {key!r}")
        memo = memo_to_proto(values)
        if self.info is not None:
            for key, value in memo_from_proto(memo).items():
                if value is None:
                    self.info.memo.pop(key, None)
                else:
                    self.info.memo[key] = value
        self._emit(workflow_task_pb2.Command(upsert_memo=workflow_task_pb2.UpsertMemo(memo=memo)))

    # --- queries --------------------------------------------------------------------

    def _refuse_in_query(self) -> None:
        if self._querying is not None:
            raise RestrictedOperationError(
                f"query {self._querying!r} tried to change the workflow (schedule an "
                "activity, start a timer, wait...): query handlers must only read state"
            )

    def current_info(self) -> WorkflowInfo:
        if self.info is None:
            raise RuntimeError("the workflow has not started")
        length, size = self.history_seen
        warn_events, warn_bytes = self.history_warn
        current = {
            "is_replaying": self.is_replaying,
            "history_length": length,
            "history_size_bytes": size,
            "continue_as_new_suggested": length >= warn_events or size >= warn_bytes,
        }
        if all(getattr(self.info, k) == v for k, v in current.items()):
            return self.info
        return WorkflowInfo(**{**self.info.__dict__, **current})
