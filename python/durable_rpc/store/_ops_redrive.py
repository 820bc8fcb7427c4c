"""Redrive: a new run of a failed run's workflow id that continues from the failed run's
last completed activity (the cut is ``_redrive_cut``'s), in one transaction."""

from __future__ import annotations

import uuid

from durable_rpc.errors import (
    InvalidArgumentError,
    WorkflowAlreadyStartedError,
    WorkflowNotFailedError,
)
from durable_rpc.store._ops_commands import _CommandOps, queue_timer
from durable_rpc.store._records import RedriveResult
from durable_rpc.store._redrive_cut import RedriveCut, cut
from durable_rpc.store._runs import (
    CheckedStart,
    create_run,
    earlier_start,
    open_run_of,
    record_start_request,
)
from durable_rpc.store._search import parse_search_attributes, read_search_attributes
from durable_rpc.store._shared import ACTIVE, append_event, find_run, require, require_namespace
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2


def redriven_by(tx: Tx, namespace: str, run_id: str) -> str | None:
    """The run that redrove ``run_id`` (a failed run is redriven at most once)."""
    row = tx.one(
        "SELECT run_id FROM runs WHERE namespace = ? AND redriven_from_run_id = ? LIMIT 1",
        (namespace, run_id),
    )
    return None if row is None else str(row["run_id"])


def _history(tx: Tx, namespace: str, run_id: str) -> list[history_pb2.HistoryEvent]:
    rows = tx.all(
        "SELECT data FROM history WHERE namespace = ? AND run_id = ? ORDER BY event_id",
        (namespace, run_id),
    )
    return [history_pb2.HistoryEvent.FromString(bytes(row["data"])) for row in rows]


def _start_options(
    tx: Tx, namespace: str, failed: Row, started: history_pb2.WorkflowStarted
) -> CheckedStart:
    """The new run's start options: the failed run's memo, its current search attributes
    (upserts included, as continue-as-new), and its timeouts counted afresh from the
    redrive (an operator restarted the execution; the old deadline may be long past)."""
    attrs = read_search_attributes(tx, namespace, [failed["run_id"]]).get(failed["run_id"])
    memo = started.memo.SerializeToString() if started.HasField("memo") else None
    execution = (
        started.execution_timeout.ToMilliseconds() if started.HasField("execution_timeout") else 0
    )
    run = started.run_timeout.ToMilliseconds() if started.HasField("run_timeout") else 0
    return CheckedStart(
        memo=memo or None,
        search_rows=parse_search_attributes(attrs),
        search_attributes=attrs,
        execution_timeout_ms=execution or None,
        run_timeout_ms=run or None,
    )


class _RedriveOps(_CommandOps):
    """RedriveWorkflow's store operation."""

    async def redrive_workflow(
        self, namespace: str, workflow_id: str, run_id: str | None, request_id: str
    ) -> RedriveResult:
        """Starts a new run of a failed run (``run_id``, or the latest run of
        ``workflow_id``) that keeps its history up to its last completed activity
        (``_redrive_cut``); one transaction. WorkflowNotFailedError when the run did not
        fail; WorkflowAlreadyStartedError when a run of the id is open or the run was
        redriven already; a repeated ``request_id`` returns the run it created."""
        require(workflow_id, "workflow_id")
        require(request_id, "request_id")

        def op(tx: Tx) -> RedriveResult:
            require_namespace(tx, namespace)
            earlier = earlier_start(tx, namespace, workflow_id, request_id)
            if earlier is not None:
                return self._repeated(tx, namespace, workflow_id, run_id, request_id, earlier)
            failed = find_run(tx, namespace, workflow_id, run_id)  # locked from here on
            failed_run_id = str(failed["run_id"])
            if failed["status"] != "failed":
                raise WorkflowNotFailedError(
                    f"run {failed_run_id} of workflow {workflow_id!r} is {failed['status']}: "
                    "only a failed run can be redriven"
                )
            by = redriven_by(tx, namespace, failed_run_id)
            if by is not None:
                # A concurrent redrive with this request id may have committed while this
                # one waited for the run's lock: then it is this request's answer.
                earlier = earlier_start(tx, namespace, workflow_id, request_id)
                if earlier is not None:
                    return self._repeated(tx, namespace, workflow_id, run_id, request_id, earlier)
                # Redriving it again would run the activities after the boundary a
                # second time, in two runs.
                raise WorkflowAlreadyStartedError(
                    f"run {failed_run_id} was already redriven by run {by}; "
                    "redrive that run if it failed too"
                )
            running = open_run_of(tx, namespace, workflow_id)
            if running is not None:
                raise WorkflowAlreadyStartedError(
                    f"workflow {workflow_id!r} already has an open run {running['run_id']}"
                )
            plan = cut(failed_run_id, _history(tx, namespace, failed_run_id))
            new_run_id = str(uuid.uuid4())
            earlier = record_start_request(tx, namespace, workflow_id, request_id, new_run_id)
            if earlier is not None:  # PostgreSQL: a concurrent start with this request id
                return self._repeated(tx, namespace, workflow_id, run_id, request_id, earlier)
            self._create(tx, namespace, failed, plan, new_run_id, request_id)
            return RedriveResult(
                run_id=new_run_id,
                resumed_after_event_id=plan.resumed_after_event_id,
                kept_activities=plan.kept_activities,
                started=True,
            )

        return await self._write(op)

    def _repeated(
        self,
        tx: Tx,
        namespace: str,
        workflow_id: str,
        run_id: str | None,
        request_id: str,
        earlier: str,
    ) -> RedriveResult:
        """The answer to a repeated request: the run it created, with the same figures
        (recomputed from the failed run's history, which no longer changes)."""
        created = find_run(tx, namespace, workflow_id, earlier)
        failed_run_id = created["redriven_from_run_id"]
        if not failed_run_id or (run_id and failed_run_id != run_id):
            raise InvalidArgumentError(
                f"request_id {request_id!r} already started run {earlier}, "
                f"which is not a redrive of {run_id or 'the latest run'}"
            )
        plan = cut(failed_run_id, _history(tx, namespace, failed_run_id))
        return RedriveResult(
            run_id=earlier,
            resumed_after_event_id=plan.resumed_after_event_id,
            kept_activities=plan.kept_activities,
            started=False,
        )

    def _create(
        self,
        tx: Tx,
        namespace: str,
        failed: Row,
        plan: RedriveCut,
        new_run_id: str,
        request_id: str,
    ) -> None:
        started = plan.events[0].workflow_started
        # The new run's own start (run id, request id, the definition registered now, so a
        # fix registered under the same name and version takes over) followed by the
        # failed run's kept events; it is not a child any more (the parent saw the
        # failure), and its first workflow task decides from the boundary on.
        _, now = create_run(
            tx,
            namespace,
            failed["workflow_id"],
            failed["workflow_type"],
            failed["workflow_version"],
            failed["task_queue"],
            started.input,
            request_id,
            dict(started.trace_context),
            _start_options(tx, namespace, failed, started),
            run_id=new_run_id,
            continued_from_run_id=started.continued_from_run_id,
            request_recorded=True,
            # Its first decisions are the failed run's: they drew from that run's seed
            # (the first of the chain's, when that run was itself redriven).
            random_seed_run_id=started.random_seed_run_id or failed["run_id"],
            fair=(failed["priority"], failed["fairness_key"]),
        )
        # No build pin is carried: a redrive usually follows the deploy of a fix, so the
        # new run is undecided (``_build_pins``) and the first build to decide it keeps it
        # (any build that registers the definition replays the same code).
        tx.run(
            "UPDATE runs SET redriven_from_run_id = ?, cancel_requested = ? "
            "WHERE namespace = ? AND run_id = ?",
            (failed["run_id"], int(plan.cancel_requested), namespace, new_run_id),
        )
        for event in plan.events[1:]:
            event_id = tx.next_event_id(namespace, new_run_id)
            assert event_id == event.event_id, (event_id, event.event_id)
            kind = event.WhichOneof("attributes")
            assert kind is not None
            tx.add_event(
                namespace,
                new_run_id,
                event_id,
                kind,
                event.event_time.ToMilliseconds(),
                event.SerializeToString(),
            )
        for activity in plan.pending_activities:
            self._queue_activity(
                tx,
                namespace,
                new_run_id,
                activity.seq,
                activity.activity_type,
                activity.input,
                activity.task_queue or failed["task_queue"],
                activity.options,
                {},
                now,
                fair=(failed["priority"], failed["fairness_key"]),
            )
        for seq in plan.cancelled_activities:
            # Workflow code had asked to cancel it and no attempt is running in the new
            # run: cancelled at once, as a queued attempt would be.
            append_event(
                tx,
                namespace,
                new_run_id,
                now,
                "activity_cancelled",
                history_pb2.ActivityCancelled(seq=seq, attempt=0),
            )
        for seq, due in plan.pending_timers:
            # A timer keeps its deadline (one already past fires at once).
            queue_timer(tx, namespace, new_run_id, failed["task_queue"], seq, max(due, now), now)
        if plan.cancel_tells_activities:
            tx.run(
                "UPDATE tasks SET cancel_requested = 1 WHERE namespace = ? AND run_id = ? "
                f"AND kind = 'activity' AND state IN {ACTIVE}",
                (namespace, new_run_id),
            )
