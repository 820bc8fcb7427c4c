"""Workflow tasks: claim, complete (recording the decision), fail, release."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._build_pins import pin_undecided_run
from durable_rpc.store._fairness import READY, READY_ORDER, outranked_column
from durable_rpc.store._history_limits import DecisionPastHistoryLimit, check_decision
from durable_rpc.store._logic import (
    INPUT_EVENT_KINDS,
    CommandPlan,
    parse_failure,
    validate_commands,
    workflow_task_backoff_ms,
)
from durable_rpc.store._ops_commands import _CommandOps
from durable_rpc.store._ops_leases import _LeaseOps, _WorkflowClaim
from durable_rpc.store._ops_updates import settle_update
from durable_rpc.store._queue_limits import QUEUE_LIMIT_COLUMN, free_slots
from durable_rpc.store._rate_limits import bucket_of, rate_limited_column, take_token
from durable_rpc.store._records import (
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    EagerActivities,
    LeaseRef,
    WorkflowTaskCompletion,
)
from durable_rpc.store._shared import (
    INPUT_KINDS_SQL,
    append_decision_inputs,
    append_event,
    ensure_workflow_task,
    fenced_update,
    open_run,
    record_outcome,
    require,
    require_namespace,
    saw_new_input,
)
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2


def _fail_for_history_limit(error: DecisionPastHistoryLimit) -> workflow_task_pb2.Command:
    """The command a decision that passed the history limit is recorded as instead."""
    failure = payload_pb2.Failure(message=error.message, type=error.reason, non_retryable=True)
    return workflow_task_pb2.Command(fail_workflow=workflow_task_pb2.FailWorkflow(failure=failure))


@dataclass(frozen=True, slots=True)
class _Decision:
    """A workflow task's decision as the store records it."""

    worker_id: str
    build_id: str
    last_seen_event_id: int
    #: The workflow clock of the decided activation (the WorkflowTaskCompleted marker's).
    workflow_time_ms: int
    commands: list[workflow_task_pb2.Command]
    plan: CommandPlan
    eager: EagerActivities | None


def _eager_seqs(
    commands: Sequence[workflow_task_pb2.Command], eager: EagerActivities | None
) -> list[int]:
    """The seqs of the scheduled activities eligible for eager dispatch, up to the limit."""
    if eager is None or eager.limit <= 0:
        return []
    return [
        c.seq
        for c in commands
        if c.WhichOneof("kind") == "schedule_activity"
        and c.schedule_activity.task_queue in ("", eager.task_queue)
        and c.schedule_activity.activity_type in eager.activity_types
        # A session's activity goes to the session's holder, through its claim.
        and not c.schedule_activity.options.HasField("session")
    ][: eager.limit]


class _WorkflowTaskOps(_LeaseOps, _CommandOps):
    """The workflow-task operations and the recording of a decision."""

    async def claim_workflow_task(
        self, namespace: str, task_queue: str, worker_id: str, lease_ms: int
    ) -> ClaimedWorkflowTask | None:
        require(worker_id, "worker_id")
        if lease_ms <= 0:
            raise InvalidArgumentError("lease_ms must be positive")

        def op(tx: Tx) -> _WorkflowClaim | None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # One statement: pick the best visible task of a definition the worker
            # serves, take it over, raise its token. The best is the first queued one in
            # the claim order (``_fairness``: priority, pass, id, read from tasks_ready);
            # only when none is queued, the first due one that waited for its due time or
            # whose lease expired (the due pass makes those queued meanwhile).
            return self._lease_workflow_task(
                tx,
                namespace,
                worker_id,
                lease_ms,
                now,
                f"namespace = ? AND kind = 'workflow' AND task_queue = ? AND {READY}",
                (namespace, task_queue),
                READY_ORDER,
                then=(
                    "namespace = ? AND kind = 'workflow' AND task_queue = ? "
                    "AND due_ms IS NOT NULL AND due_ms <= ? AND state IN ('waiting', 'leased')",
                    (namespace, task_queue, now),
                    " ORDER BY due_ms, task_id LIMIT 1",
                ),
            )

        claim = await self._write(op)
        return None if claim is None else await self._with_history(namespace, worker_id, claim)

    async def complete_workflow_task(
        self,
        namespace: str,
        lease: LeaseRef,
        last_seen_event_id: int,
        commands: Sequence[workflow_task_pb2.Command],
        build_id: str = "",
        eager: EagerActivities | None = None,
    ) -> list[ClaimedActivityTask]:
        """Records the leased workflow task's decision (``commands``, made after event
        ``last_seen_event_id``); the activities claimed eagerly with it."""
        completion = await self.complete_workflow_task_tracked(
            namespace, lease, last_seen_event_id, commands, build_id, eager
        )
        return completion.eager_activities

    async def complete_workflow_task_tracked(
        self,
        namespace: str,
        lease: LeaseRef,
        last_seen_event_id: int,
        commands: Sequence[workflow_task_pb2.Command],
        build_id: str = "",
        eager: EagerActivities | None = None,
        rejected_updates: Sequence[tuple[str, bytes]] = (),
    ) -> WorkflowTaskCompletion:
        """``complete_workflow_task``, also answering the events it appended.
        ``rejected_updates``: (update id, serialized Failure) of the pending update
        requests the workflow's validators rejected."""
        commands = list(commands)
        plan = validate_commands(commands)
        rejections = list(rejected_updates)
        for update_id, failure in rejections:
            require(update_id, "rejected update id")
            parse_failure(failure, f"rejection of update {update_id!r}")

        def op(
            tx: Tx,
            commands: list[workflow_task_pb2.Command],
            plan: CommandPlan,
            eager: EagerActivities | None,
        ) -> WorkflowTaskCompletion:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = record_outcome(
                tx,
                namespace,
                lease,
                "workflow",
                now,
                "completed",
                "state = 'completed', due_ms = NULL",
            )
            if task is None:
                return WorkflowTaskCompletion([], [], 0)
            run = open_run(tx, namespace, task["run_id"])
            if not 0 <= last_seen_event_id <= run["history_length"]:
                raise InvalidArgumentError(
                    f"last_seen_event_id {last_seen_event_id} is outside the history "
                    f"(1..{run['history_length']})"
                )
            # A task that saw no new input and decided nothing (e.g. it only rejected
            # updates) records nothing: rejected updates leave no trace in history.
            self._check_decision(tx, run, plan)
            for update_id, failure in rejections:
                settle_update(tx, namespace, run["run_id"], update_id, failure)
            marker_needed = bool(commands) or saw_new_input(
                tx, namespace, run["run_id"], last_seen_event_id
            )
            return self._record_decision(
                tx,
                run,
                _Decision(
                    lease.worker_id,
                    build_id,
                    last_seen_event_id,
                    task["claimed_at_ms"],
                    commands,
                    plan,
                    eager,
                ),
                marker_needed,
                now,
            )

        try:
            return await self._write(lambda tx: op(tx, commands, plan, eager))
        except DecisionPastHistoryLimit as error:
            # As Temporal does: the decision's commands are not applied (its transaction
            # rolled back) and the run fails with HISTORY_LIMIT_EXCEEDED instead, under
            # the same lease, in one transaction. A closing command is never past the
            # limit (``_record_decision``), so this second try records.
            failing = [_fail_for_history_limit(error)]
            failing_plan = validate_commands(failing)
            return await self._write(lambda tx: op(tx, failing, failing_plan, None))

    def _check_decision(self, tx: Tx, run: Row, plan: CommandPlan) -> None:
        """The checks of a decision that need stored state (before anything is written):
        new seqs are unused, cancelled timers exist. Raises InvalidArgumentError."""
        namespace: str = run["namespace"]
        run_id: str = run["run_id"]
        if plan.new_seqs:
            marks = ", ".join("?" for _ in plan.new_seqs)
            used = tx.all(
                f"SELECT seq FROM tasks WHERE namespace = ? AND run_id = ? AND seq IN ({marks})",
                (namespace, run_id, *plan.new_seqs),
            )
            if used:
                seqs = sorted(row["seq"] for row in used)
                raise InvalidArgumentError(f"seq {seqs} already used in run {run_id}")
        for timer_seq in plan.cancelled_existing_timers:
            timer = tx.one(
                "SELECT kind FROM tasks WHERE namespace = ? AND run_id = ? AND seq = ?",
                (namespace, run_id, timer_seq),
            )
            if timer is None or timer["kind"] != "timer":
                raise InvalidArgumentError(f"cancel_timer: no timer with seq {timer_seq}")

    def _decision_acceptable(self, tx: Tx, run: Row, plan: CommandPlan) -> bool:
        try:
            self._check_decision(tx, run, plan)
        except InvalidArgumentError:
            return False
        return True

    def _record_decision(
        self, tx: Tx, run: Row, decision: _Decision, marker_needed: bool, now: int
    ) -> WorkflowTaskCompletion:
        """Records a workflow task's decision on an open run, inside the completing
        transaction (the task's fence already checked): the WorkflowTaskCompleted marker,
        one event and effect per command, a follow-up task for input that arrived
        meanwhile, and the eager activity claims. The caller ran ``_check_decision``."""
        namespace: str = run["namespace"]
        run_id: str = run["run_id"]
        commands = decision.commands
        # Before the commands apply: a continue-as-new among them carries the pin.
        run = pin_undecided_run(tx, run, decision.worker_id)
        if marker_needed:
            marker = history_pb2.WorkflowTaskCompleted(
                last_seen_event_id=decision.last_seen_event_id,
                worker_id=decision.worker_id,
                build_id=decision.build_id,
            )
            marker.workflow_time.FromMilliseconds(decision.workflow_time_ms)
            append_event(tx, namespace, run_id, now, "workflow_task_completed", marker)
        closed = False
        for command in commands:
            closed = self._apply_command(tx, namespace, run, command, now) or closed
        append_decision_inputs(tx, closed)
        if not closed:
            self._append_immediate_cancellations(tx, namespace, run_id, commands, now)
            # A decision that closes the run is always recorded: it ends the growth.
            check_decision(tx, self._options.history, namespace, run_id)
            new_input = tx.appended_after(
                namespace, run_id, decision.last_seen_event_id, INPUT_EVENT_KINDS
            )
            if new_input is None:
                new_input = (
                    tx.one(
                        "SELECT event_id FROM history WHERE namespace = ? AND run_id = ? "
                        f"AND event_id > ? AND kind IN {INPUT_KINDS_SQL} LIMIT 1",
                        (namespace, run_id, decision.last_seen_event_id),
                    )
                    is not None
                )
            if new_input:
                ensure_workflow_task(tx, namespace, run_id, run["task_queue"], now)
        if run["wft_attempt"] != 1 or run["last_wft_failure"] is not None:
            tx.run(
                "UPDATE runs SET wft_attempt = 1, last_wft_failure = NULL "
                "WHERE namespace = ? AND run_id = ?",
                (namespace, run_id),
            )
        appended = [data for appended_run, data in tx.appended if appended_run == run_id]
        # `run` was read (and, on PostgreSQL, locked) before this operation appended.
        history_length = run["history_length"] + len(appended)
        eager = decision.eager
        eager_seqs = _eager_seqs(commands, eager)
        if closed or eager is None or not eager_seqs or run["task_queue"] != eager.task_queue:
            return WorkflowTaskCompletion([], appended, history_length)
        claimed = self._claim_eager_activities(
            tx, namespace, run_id, run["workflow_id"], decision.worker_id, eager_seqs, now
        )
        on_queue = sum(
            1
            for c in commands
            if c.WhichOneof("kind") == "schedule_activity"
            and (c.schedule_activity.task_queue or run["task_queue"]) == eager.task_queue
        )
        if claimed and len(claimed) == on_queue:
            # Every activity scheduled on that queue went to this worker: waking a
            # poller would only cost it a claim that finds nothing.
            tx.notes.tasks.discard((namespace, run["task_queue"], "activity"))
        return WorkflowTaskCompletion(claimed, appended, history_length)

    def _claim_eager_activities(
        self,
        tx: Tx,
        namespace: str,
        run_id: str,
        workflow_id: str,
        worker_id: str,
        seqs: list[int],
        now: int,
    ) -> list[ClaimedActivityTask]:
        # Tasks queued by this transaction are still queued (nobody else sees them yet).
        queued = [tx.queued_activities.get((namespace, run_id, seq)) for seq in sorted(seqs)]
        candidates = [row for row in queued if row is not None]
        if len(candidates) < len(seqs):
            marks = ", ".join("?" for _ in seqs)
            candidates = tx.all(
                "SELECT task_id, task_queue, lease_ms, start_to_close_ms, "
                f"{outranked_column('t')}, "
                f"schedule_to_close_deadline_ms, {QUEUE_LIMIT_COLUMN}, "
                f"{rate_limited_column('t')} FROM tasks t "
                "WHERE namespace = ? AND run_id = ? AND kind = 'activity' "
                f"AND state = 'queued' AND seq IN ({marks}) ORDER BY seq",
                (namespace, run_id, *seqs),
            )
        # An eager claim is a claim: it never jumps a more urgent queued activity (that
        # one stays first in the claim order; this one stays queued behind it).
        candidates = [c for c in candidates if not c["outranked"]]
        limited = {c["task_queue"] for c in candidates if c["queue_limit"] is not None}
        for queue in limited:
            # An eager claim is a claim: it takes only the queue's free slots (the rest
            # stay queued for the polls, which the commit wakes).
            free = free_slots(tx, namespace, queue)
            if free is None:
                continue  # the limit was removed meanwhile
            kept = []
            for c in candidates:
                if c["task_queue"] == queue:
                    if free <= 0:
                        self._stats.deferred_claims += 1
                        continue
                    free -= 1
                kept.append(c)
            candidates = kept
        if any(c["rate_limited"] is not None for c in candidates):
            # An eager claim takes a token like a poll's (in command order); one with no
            # token leaves its task queued for the polls, which look again when the
            # next token is due.
            kept = []
            for c in candidates:
                if c["rate_limited"] is not None:
                    scope, name = bucket_of(c["rate_key"], c["rate_type"])
                    if take_token(tx, namespace, scope, name, now) is not None:
                        self._stats.rate_deferred_claims += 1
                        continue
                kept.append(c)
            candidates = kept
        return [
            self._lease_activity(tx, namespace, c, worker_id, now, workflow_id) for c in candidates
        ]

    async def release_workflow_task(self, namespace: str, lease: LeaseRef) -> bool:
        """Give a claimed workflow task back unchanged (queued again, claimable at once),
        e.g. when the worker it was claimed for left before it could be handed over.
        Fenced like every write after a claim; False when the lease no longer holds."""

        def op(tx: Tx) -> bool:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            released = fenced_update(
                tx,
                namespace,
                lease,
                "workflow",
                now,
                "state = 'queued', worker_id = NULL, expires_at_ms = NULL, "
                "claimed_at_ms = NULL, due_ms = ?, visible_at_ms = ?",
                (now, now),
            )
            if released is None:
                return False
            tx.notes.tasks.add((namespace, released["task_queue"], "workflow"))
            return True

        return await self._write(op)

    async def fail_workflow_task(
        self, namespace: str, lease: LeaseRef, failure: bytes
    ) -> int | None:
        """Fail the leased workflow task; it is retried after a backoff: that backoff in
        ms (None when this lease's outcome was already recorded)."""
        parse_failure(failure)
        options = self._options

        def op(tx: Tx) -> int | None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            task = record_outcome(
                tx,
                namespace,
                lease,
                "workflow",
                now,
                "failed",
                "state = 'waiting', attempt = attempt + 1, expires_at_ms = NULL",
            )
            if task is None:
                return None
            failed_attempt = task["attempt"] - 1
            visible = now + workflow_task_backoff_ms(
                failed_attempt,
                options.workflow_task_initial_backoff_ms,
                options.workflow_task_max_backoff_ms,
            )
            tx.run(
                "UPDATE tasks SET visible_at_ms = ?, due_ms = ? WHERE task_id = ?",
                (visible, visible, task["task_id"]),
            )
            tx.run(
                "UPDATE runs SET last_wft_failure = ?, wft_attempt = ? "
                "WHERE namespace = ? AND run_id = ?",
                (failure, task["attempt"], namespace, task["run_id"]),
            )
            tx.notes.due.add(visible)
            return visible - now

        return await self._write(op)
