"""Taking a lease: the claim of a workflow task (with its history) or an activity task.

Shared by the operations that claim: polls, a start's folded claim, a completion's eager
claims. Lease expiries are looked at on a grid (:func:`lease_check_at`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from durable_rpc.store._history_pages import read_page, read_range
from durable_rpc.store._logic import activity_timeouts, earliest, parse_options
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._ops_updates import pending_update_requests
from durable_rpc.store._rate_limits import rate_open
from durable_rpc.store._records import (
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    LeaseRef,
    PendingUpdateRequest,
    TaskKind,
)
from durable_rpc.store._shared import ACTIVE, blob
from durable_rpc.store._tx import Row, Tx


@dataclass(frozen=True, slots=True)
class _WorkflowClaim:
    task_id: int
    fencing_token: int
    expires_at_ms: int
    now_ms: int
    attempt: int
    run: Row
    #: The history, when it was short enough to read inside the claiming transaction.
    events: list[bytes] | None = None
    queue_delay_ms: int = 0
    pending_updates: tuple[PendingUpdateRequest, ...] = ()


# Lease expiries are looked at on this grid (ms): every claim adds one, and almost every
# lease ends long before it expires, so rounding them up lets one due pass serve many
# (an expired lease is noticed at most this much late; timers keep their exact times).
LEASE_CHECK_GRANULARITY_MS = 250


def lease_check_at(expires_ms: int) -> int:
    """When the server should look for the lease expiring at ``expires_ms``."""
    return -(-expires_ms // LEASE_CHECK_GRANULARITY_MS) * LEASE_CHECK_GRANULARITY_MS


# Histories up to this many events are read inside the claiming transaction: cheaper than
# a second round trip to the reader; longer ones are read after the commit, off the writer.
INLINE_HISTORY_EVENTS = 256


def _first_page(tx: Tx, run: Row, page_bytes: int) -> list[bytes]:
    """The claimed task's history through the run's length, or its first ``page_bytes``
    (the worker fetches the rest: GetWorkflowTaskHistory). A history the run row says
    fits one page is read in one statement, without sizing its events first."""
    namespace, run_id, length = run["namespace"], run["run_id"], run["history_length"]
    if run["history_size_bytes"] <= page_bytes:
        return read_range(tx, namespace, run_id, 0, length)
    return read_page(tx, namespace, run_id, 0, length, max(length, 1), page_bytes)[0]


# Which workflow tasks a worker may claim (a condition on the pick's ``tasks t``; params:
# namespace, worker_id, worker_id, worker_id): those of the (name, version) definitions it
# registered with RegisterWorker, so a worker never claims a run it cannot replay (a
# v1-only worker, a v2 run) and a run whose definition no worker registers stays
# unclaimed; and of a run pinned to a build (``t.build_id``, ``_build_pins``) only a
# worker registered with that build. A worker id that never registered (no ``workers``
# row) is served every unpinned definition: the protocol before registration, which raw
# clients and the store's tests still speak. The subqueries read only the worker's own
# rows (primary-key prefixes), never ``runs``: the task row carries its run's definition
# (migration 8) and pin (migration 11), so the plan stays the ordered index scan of
# ``tasks_claim`` whatever the number of runs; an unpinned task never reaches the build
# probe.
SERVED_BY_WORKER = (
    "((t.build_id IS NULL "
    "AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.namespace = ? AND w.worker_id = ?)) "
    "OR (EXISTS (SELECT 1 FROM worker_definitions wd WHERE wd.namespace = t.namespace "
    "AND wd.worker_id = ? AND wd.name = t.workflow_type "
    "AND wd.version = t.workflow_version) "
    "AND (t.build_id IS NULL OR EXISTS (SELECT 1 FROM workers wb "
    "WHERE wb.namespace = t.namespace AND wb.worker_id = ? AND wb.build_id = t.build_id))))"
)


def definition_unavailable_reason(run: Row) -> str:
    """Describe's sentence for an open run no live worker of its queue registers (of
    its build, when the run is pinned to one)."""
    build = run["build_id"]
    of_build = f" of build {build!r}" if build else ""
    return (
        f"No live worker{of_build} on task queue {run['task_queue']!r} registers workflow "
        f"{run['workflow_type']!r} version {run['workflow_version']!r}, so its workflow "
        f"tasks are not claimed: start a worker{of_build} that registers this definition."
    )


class _LeaseOps(_SqlOpsBase):
    """Leases a picked task to a worker."""

    async def has_claimable_task(self, namespace: str, task_queue: str, kind: TaskKind) -> bool:
        """Whether a ``kind`` task of the queue is claimable now by someone (any activity
        type, any definition), as last committed. A woken poll asks it before passing its
        wake-up on: when nothing is left, the wake-up has nobody to reach."""
        if kind == "query":
            return True  # queries are few and short-lived: every woken poll may try
        # The claims' own conditions (claim_workflow_task, claim_activity_task) without
        # the claimer's filter; one indexed probe of tasks_claim, no transaction.
        states = "('queued', 'waiting')" if kind == "activity" else ACTIVE

        def op(tx: Tx) -> bool:
            now = tx.now_sql()
            # A task its rate limit holds back is not claimable: passing a wake-up on
            # for it would have each waiting poll claim nothing in turn.
            deadline = (
                f" AND (queue_deadline_ms IS NULL OR queue_deadline_ms > {now})"
                f" AND {rate_open('t', now)}"
                if kind == "activity"
                else ""
            )
            row = tx.one(
                "SELECT 1 AS present FROM tasks t WHERE namespace = ? AND kind = ? "
                f"AND task_queue = ? AND due_ms IS NOT NULL AND due_ms <= {now} "
                f"AND state IN {states}{deadline} LIMIT 1",
                (namespace, kind, task_queue, *((namespace,) if kind == "activity" else ())),
            )
            return row is not None

        return await self._read_latest(op)

    async def lease_holds(self, namespace: str, lease: LeaseRef) -> bool:
        """Whether ``lease`` is still its task's (leased to that worker under that token,
        not expired by the database clock), as last committed; changes nothing. A
        retried poll asks it before it hands the task its lost attempt claimed again."""

        def op(tx: Tx) -> bool:
            row = tx.one(
                "SELECT 1 AS held FROM tasks WHERE namespace = ? AND task_id = ? "
                "AND worker_id = ? AND fencing_token = ? AND state = 'leased' "
                f"AND expires_at_ms > {tx.now_sql()}",
                (namespace, lease.task_id, lease.worker_id, lease.fencing_token),
            )
            return row is not None

        return await self._read_latest(op)

    def _lease_workflow_task(
        self,
        tx: Tx,
        namespace: str,
        worker_id: str,
        lease_ms: int,
        now: int,
        pick_where: str,
        pick_params: Sequence[object],
        pick_order: str = "",
        then: tuple[str, Sequence[object], str] | None = None,
    ) -> _WorkflowClaim | None:
        """Leases to `worker_id` the first workflow task of ``tasks t`` (in `pick_order`)
        that matches `pick_where` and that the worker serves (`SERVED_BY_WORKER`): one
        statement, so every way of claiming a workflow task applies the same filter.
        ``then`` (where, params, order): the pick when the first finds none, in the same
        statement (COALESCE evaluates it only then)."""
        expires = now + lease_ms
        picks = [(pick_where, pick_params, pick_order), *([then] if then else [])]
        chosen = ", ".join(
            f"(SELECT task_id FROM tasks t WHERE {where} "
            f"AND {SERVED_BY_WORKER}{order}{tx.claim_lock_suffix})"
            for where, _, order in picks
        )
        row = tx.one(
            "UPDATE tasks SET state = 'leased', worker_id = ?, "
            "fencing_token = fencing_token + 1, "
            "attempt = CASE WHEN state = 'leased' THEN attempt + 1 ELSE attempt END, "
            "claimed_at_ms = ?, expires_at_ms = ?, due_ms = ?, "
            "outcome_token = NULL, outcome_kind = NULL "
            f"WHERE task_id = {chosen if then is None else f'COALESCE({chosen})'} "
            "RETURNING task_id, run_id, fencing_token, attempt, visible_at_ms",
            (
                worker_id,
                now,
                expires,
                expires,
                *(
                    value
                    for _, params, _ in picks
                    for value in (*params, namespace, worker_id, worker_id, worker_id)
                ),
            ),
        )
        if row is None:
            return None
        run = tx.one(
            "UPDATE runs SET wft_attempt = ? WHERE namespace = ? AND run_id = ? RETURNING *",
            (row["attempt"], namespace, row["run_id"]),
        )
        assert run is not None
        tx.notes.due.add(lease_check_at(expires))
        length = run["history_length"]
        return _WorkflowClaim(
            task_id=row["task_id"],
            fencing_token=row["fencing_token"],
            expires_at_ms=expires,
            now_ms=now,
            attempt=row["attempt"],
            run=run,
            queue_delay_ms=max(0, now - row["visible_at_ms"]),
            events=(
                tx.whole_history(namespace, row["run_id"])
                or _first_page(tx, run, self._options.history.page_bytes)
                if length <= INLINE_HISTORY_EVENTS
                else None
            ),
            pending_updates=(
                tuple(pending_update_requests(tx, namespace, row["run_id"]))
                if run["pending_updates"]
                else ()
            ),
        )

    async def _with_history(
        self, namespace: str, worker_id: str, claim: _WorkflowClaim
    ) -> ClaimedWorkflowTask:
        run = claim.run
        events = claim.events
        if events is None:
            # History is append-only: reading it after the claim committed, up to the
            # length seen by the claim, is the claim's snapshot (big reads stay off the
            # writer).
            page_bytes = self._options.history.page_bytes
            events = await self._read(lambda tx: _first_page(tx, run, page_bytes))
        return ClaimedWorkflowTask(
            task_id=claim.task_id,
            worker_id=worker_id,
            fencing_token=claim.fencing_token,
            lease_expires_at_ms=claim.expires_at_ms,
            workflow_time_ms=claim.now_ms,
            attempt=claim.attempt,
            workflow_id=run["workflow_id"],
            run_id=run["run_id"],
            workflow_type=run["workflow_type"],
            workflow_version=run["workflow_version"],
            task_queue=run["task_queue"],
            events=events,
            pending_updates=claim.pending_updates,
            history_length=run["history_length"],
            history_size_bytes=run["history_size_bytes"],
            queue_delay_ms=claim.queue_delay_ms,
        )

    def _lease_activity(
        self,
        tx: Tx,
        namespace: str,
        candidate: Row,
        worker_id: str,
        now: int,
        workflow_id: str | None = None,
    ) -> ClaimedActivityTask:
        """Leases the queued/waiting activity task `candidate` (task_id, lease_ms,
        start_to_close_ms, schedule_to_close_deadline_ms) to `worker_id`."""
        start_to_close = candidate["start_to_close_ms"]
        attempt_deadline = earliest(
            now + start_to_close if start_to_close is not None else None,
            candidate["schedule_to_close_deadline_ms"],
        )
        expires = earliest(now + candidate["lease_ms"], attempt_deadline)
        assert expires is not None
        row = tx.one(
            "UPDATE tasks SET state = 'leased', worker_id = ?, "
            "fencing_token = fencing_token + 1, claimed_at_ms = ?, expires_at_ms = ?, "
            "due_ms = ?, attempt_deadline_ms = ?, queue_deadline_ms = NULL, "
            "outcome_token = NULL, outcome_kind = NULL "
            "WHERE task_id = ? AND state IN ('queued', 'waiting') RETURNING *",
            (worker_id, now, expires, expires, attempt_deadline, candidate["task_id"]),
        )
        assert row is not None
        if workflow_id is None:
            workflow_id = tx.value(
                "SELECT workflow_id FROM runs WHERE namespace = ? AND run_id = ?",
                (namespace, row["run_id"]),
            )
        options_bytes = bytes(row["options"])
        timeouts = activity_timeouts(parse_options(options_bytes))
        tx.notes.due.add(lease_check_at(expires))
        return ClaimedActivityTask(
            task_id=row["task_id"],
            worker_id=worker_id,
            fencing_token=row["fencing_token"],
            lease_expires_at_ms=expires,
            workflow_id=str(workflow_id),
            run_id=row["run_id"],
            seq=row["seq"],
            activity_type=row["activity_type"],
            input=bytes(row["input"]),
            attempt=row["attempt"],
            heartbeat_details=blob(row["heartbeat_details"]),
            heartbeat_timeout_ms=timeouts.heartbeat_ms,
            start_to_close_timeout_ms=timeouts.start_to_close_ms,
            options=options_bytes,
            trace_context=json.loads(row["trace_context"]) if row["trace_context"] else {},
            queue_delay_ms=max(0, now - row["visible_at_ms"]),
        )
