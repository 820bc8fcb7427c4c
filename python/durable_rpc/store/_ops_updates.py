"""Update requests waiting outside history for a workflow task to accept or reject them.

An update becomes part of a run's history only when the workflow accepts it
(``UpdateAccepted``, then ``UpdateCompleted``); a rejected one must leave no trace there.
Until then its request is kept in ``update_requests`` — in the database, not in the
memory of the replica the client asked, because the workflow task that delivers it may
be claimed through any replica. Every workflow task claimed for the run carries its
pending requests (``ClaimedWorkflowTask.pending_updates``) until a decision settles them:
an ``accept_update`` command deletes the request, a rejection reported with the decision
marks it rejected (kept a day, so a repeated update id gets the same answer). Each
settlement is a listener note (``update_changed``; a NOTIFY across replicas) that wakes
the callers waiting for the update on any replica.
"""

from __future__ import annotations

from collections.abc import Mapping

from durable_rpc.errors import AdmissionLimitError, ResourceExhaustedError
from durable_rpc.store._history_limits import refuse_input
from durable_rpc.store._logic import parse_payload
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._options import HistoryLimits
from durable_rpc.store._records import PendingUpdateRequest, StartOptions, UpdateWithStartResult
from durable_rpc.store._runs import check_start, create_run, earlier_start, open_run_of
from durable_rpc.store._shared import (
    ensure_workflow_task,
    require,
    require_namespace,
)
from durable_rpc.store._tx import Row, Tx

#: Requests one run may have pending before ``request_update`` refuses more.
MAX_PENDING_UPDATES_PER_RUN = 1000
#: How long a rejection is remembered for a repeated update id.
REJECTION_RETENTION_MS = 24 * 3600 * 1000


def pending_update_requests(tx: Tx, namespace: str, run_id: str) -> list[PendingUpdateRequest]:
    """The run's pending requests, oldest first (handed out with each workflow task)."""
    rows = tx.all(
        "SELECT update_id, update_name, input FROM update_requests WHERE namespace = ? "
        "AND run_id = ? AND state = 'pending' ORDER BY created_at_ms, update_id",
        (namespace, run_id),
    )
    return [
        PendingUpdateRequest(row["update_id"], row["update_name"], bytes(row["input"]))
        for row in rows
    ]


def settle_update(
    tx: Tx, namespace: str, run_id: str, update_id: str, rejection: bytes | None
) -> None:
    """A decision of the run accepted (``rejection`` None) or rejected the update: its
    pending request is done. Wakes the update's callers either way."""
    if rejection is None:
        settled = tx.run(
            "DELETE FROM update_requests WHERE namespace = ? AND run_id = ? "
            "AND update_id = ? AND state = 'pending'",
            (namespace, run_id, update_id),
        )
    else:
        settled = tx.run(
            "UPDATE update_requests SET state = 'rejected', failure = ? WHERE namespace = ? "
            "AND run_id = ? AND update_id = ? AND state = 'pending'",
            (rejection, namespace, run_id, update_id),
        )
    if settled:
        tx.run(
            "UPDATE runs SET pending_updates = pending_updates - ? "
            "WHERE namespace = ? AND run_id = ?",
            (settled, namespace, run_id),
        )
    tx.notes.updates.append((namespace, update_id))


# What an accepted update adds to history besides its input and name: UpdateAccepted and
# UpdateCompleted events' framing, ids and times (its result is the decision's).
_UPDATE_EVENTS_OVERHEAD_BYTES = 128


def hold_update_request(
    tx: Tx,
    namespace: str,
    run: Row,
    update_id: str,
    update_name: str,
    input: bytes,
    limits: HistoryLimits,
) -> None:
    """Records the request on the open ``run`` (read under its row lock: run_id,
    task_queue, pending_updates) unless it is known already (a repeated id; a rejected id
    stays rejected), and makes sure a workflow task will deliver it."""
    run_id: str = run["run_id"]
    now = tx.now_ms()
    tx.run(
        "DELETE FROM update_requests WHERE state = 'rejected' AND created_at_ms <= ?",
        (now - REJECTION_RETENTION_MS,),
    )
    known = tx.one(
        "SELECT state FROM update_requests WHERE namespace = ? AND run_id = ? AND update_id = ?",
        (namespace, run_id, update_id),
    )
    if known is not None and known["state"] == "rejected":
        return
    if known is None:
        if run["pending_updates"] >= MAX_PENDING_UPDATES_PER_RUN:
            raise ResourceExhaustedError(
                f"{run['pending_updates']} updates of run {run_id} already wait for a workflow task"
            )
        # Checked when the request is recorded (it is in history only once accepted), so
        # a caller learns it now, not from a run that later fails on it.
        events_bytes = len(input) + len(update_name) + 2 * len(update_id)
        refuse_input(
            tx,
            limits,
            namespace,
            run_id,
            f"update {update_name!r}",
            extra_events=2,
            extra_bytes=events_bytes + _UPDATE_EVENTS_OVERHEAD_BYTES,
        )
        tx.run(
            "INSERT INTO update_requests (namespace, run_id, update_id, update_name, input, "
            "state, created_at_ms) VALUES (?, ?, ?, ?, ?, 'pending', ?)",
            (namespace, run_id, update_id, update_name, input, now),
        )
        tx.run(
            "UPDATE runs SET pending_updates = pending_updates + 1 "
            "WHERE namespace = ? AND run_id = ?",
            (namespace, run_id),
        )
    # A workflow task delivers it (none is queued when one is queued or running: the
    # caller asks again after that one completes).
    ensure_workflow_task(tx, namespace, run_id, run["task_queue"], now)


class _UpdateOps(_SqlOpsBase):
    """Update requests: held for the run's workflow tasks (with a start when the workflow
    has no open run), looked up, forgotten."""

    async def request_update(
        self, namespace: str, run_id: str, update_id: str, update_name: str, input: bytes
    ) -> bool:
        """Holds the request for the run's next workflow tasks (idempotent by id) and
        makes sure one is queued. False when the run is not running."""
        require(update_id, "update_id")
        require(update_name, "update_name")
        parse_payload(input, "update input")

        def op(tx: Tx) -> bool:
            require_namespace(tx, namespace)
            run = tx.one(
                "SELECT run_id, status, task_queue, pending_updates FROM runs "
                f"WHERE namespace = ? AND run_id = ?{tx.row_lock_suffix}",
                (namespace, run_id),
            )
            if run is None or run["status"] != "running":
                return False
            hold_update_request(
                tx, namespace, run, update_id, update_name, input, self._options.history
            )
            return True

        return await self._write(op)

    async def update_with_start(
        self,
        namespace: str,
        workflow_id: str,
        workflow_type: str,
        workflow_version: str,
        task_queue: str,
        input: bytes,
        update_id: str,
        update_name: str,
        update_input: bytes,
        trace_context: Mapping[str, str] | None = None,
        options: StartOptions | None = None,
    ) -> UpdateWithStartResult:
        """``request_update`` on the open run of ``workflow_id``, or on a run this call
        starts (one transaction; ``update_id`` is also the start's request id)."""
        version, start_payload, checked = check_start(
            workflow_id, workflow_type, workflow_version, task_queue, input, options
        )
        require(update_id, "update_id")
        require(update_name, "update_name")
        parse_payload(update_input, "update input")

        def op(tx: Tx) -> UpdateWithStartResult:
            require_namespace(tx, namespace)
            run = open_run_of(tx, namespace, workflow_id)
            if run is None:
                # The update id doubles as the start's request id: a retried call finds
                # the run it started, even after that run closed.
                earlier = earlier_start(tx, namespace, workflow_id, update_id)
                if earlier is not None:
                    return UpdateWithStartResult(earlier, started=False)
                run_id, _ = create_run(
                    tx,
                    namespace,
                    workflow_id,
                    workflow_type,
                    version,
                    task_queue,
                    start_payload,
                    update_id,
                    trace_context,
                    checked,
                    admitted=False,
                )
                self._stats.deferred_starts += tx.deferred_starts
                # Its first workflow task (queued by create_run) carries the request.
                new_run = {"run_id": run_id, "task_queue": task_queue, "pending_updates": 0}
                refuse_input(tx, self._options.history, namespace, run_id, "start")
                hold_update_request(
                    tx,
                    namespace,
                    new_run,
                    update_id,
                    update_name,
                    update_input,
                    self._options.history,
                )
                return UpdateWithStartResult(run_id, started=True)
            hold_update_request(
                tx, namespace, run, update_id, update_name, update_input, self._options.history
            )
            return UpdateWithStartResult(str(run["run_id"]), started=False)

        try:
            return await self._write(op)
        except AdmissionLimitError:
            self._stats.refused_starts += 1
            raise

    async def update_rejection(self, namespace: str, run_id: str, update_id: str) -> bytes | None:
        """The serialized Failure of a rejected request (kept a day), else None."""

        def op(tx: Tx) -> bytes | None:
            row = tx.one(
                "SELECT failure FROM update_requests WHERE namespace = ? AND run_id = ? "
                "AND update_id = ? AND state = 'rejected'",
                (namespace, run_id, update_id),
            )
            return None if row is None else bytes(row["failure"])

        return await self._read_latest(op)

    async def forget_update(self, namespace: str, run_id: str, update_id: str) -> None:
        """Drops a pending request (its caller gave up on a run that closed)."""

        def op(tx: Tx) -> None:
            forgotten = tx.run(
                "DELETE FROM update_requests WHERE namespace = ? AND run_id = ? "
                "AND update_id = ? AND state = 'pending'",
                (namespace, run_id, update_id),
            )
            if forgotten:
                tx.run(
                    "UPDATE runs SET pending_updates = pending_updates - 1 "
                    "WHERE namespace = ? AND run_id = ?",
                    (namespace, run_id),
                )

        await self._write(op)
