"""Schedules: create, describe, list, pause, trigger, backfill, update, delete, and the
firing pass.

A firing is a fenced claim of the schedule's due slot: one conditional UPDATE moves
``fire_at_ms`` from the value it was read with to the next due time, and only the
transaction whose UPDATE matched starts the run, in the same transaction. So each due
time starts at most one run cluster-wide (another replica's pass matches nothing), and a
crash before the commit leaves the slot due (the restarted pass fires it): never none,
never two. The run's workflow id and request id derive from the schedule id and due time,
so a trigger or backfill retried after a lost reply finds the run it already started.
"""

from __future__ import annotations

import json
import uuid

from durable_rpc.errors import InvalidArgumentError, NotFoundError
from durable_rpc.store._logic import failure_bytes
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._run_close import close_run
from durable_rpc.store._runs import check_start, create_run, open_run_of, record_start_request
from durable_rpc.store._schedule_buffer import (
    BUFFERING,
    blocking,
    clear,
    push,
    ready,
    take_oldest,
    waiting,
)
from durable_rpc.store._schedule_records import (
    ScheduleAction,
    ScheduleDefinition,
    ScheduleFiring,
    ScheduleInfo,
)
from durable_rpc.store._schedule_spec import (
    OVERLAP_POLICIES,
    ScheduleSpec,
    check_spec,
    due_times,
    jitter,
    next_due,
    run_workflow_id,
)
from durable_rpc.store._shared import (
    LIST_LIMIT_MAX,
    append_event,
    request_cancel_run,
    require,
    require_namespace,
)
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2

# Actions kept per schedule for describe; older ones are deleted as new ones come.
RECENT_ACTIONS = 20
# Due times describe lists ahead.
NEXT_TIMES = 5
# Due times one schedule fires in one pass (a long outage under ALLOW_ALL catches up over
# several passes, each a bounded transaction).
FIRE_BATCH = 100
# Open runs a pass reports as blocking waiting due times (more are found by the loop's
# look-again bound).
WAITING_ON_MAX = 1000


def _check(definition: ScheduleDefinition) -> None:
    check_spec(definition.spec)
    check_start(
        "schedule",
        definition.workflow_type,
        definition.workflow_version,
        definition.task_queue,
        definition.input,
        None,
    )
    if definition.overlap not in OVERLAP_POLICIES:
        raise InvalidArgumentError(
            f"unknown overlap policy {definition.overlap!r} (one of {', '.join(OVERLAP_POLICIES)})"
        )
    if definition.catchup_window_ms <= 0:
        raise InvalidArgumentError("catchup_window must be positive")


def _spec_json(spec: ScheduleSpec) -> str:
    return json.dumps(
        {
            "cron": spec.cron,
            "interval_ms": spec.interval_ms,
            "timezone": spec.timezone,
            "jitter_ms": spec.jitter_ms,
        }
    )


def _spec(row: Row) -> ScheduleSpec:
    return ScheduleSpec(**json.loads(row["spec"]))


def _definition(row: Row) -> ScheduleDefinition:
    return ScheduleDefinition(
        workflow_type=row["workflow_type"],
        workflow_version=row["workflow_version"],
        task_queue=row["task_queue"],
        input=bytes(row["input"]),
        spec=_spec(row),
        overlap=row["overlap"],
        catchup_window_ms=row["catchup_window_ms"],
    )


def _slot(schedule_id: str, spec: ScheduleSpec, anchor_ms: int, after_ms: int) -> tuple[int, int]:
    """(next due time, when it fires: the due time plus its jitter)."""
    due = next_due(spec, anchor_ms, after_ms)
    return due, due + jitter(schedule_id, due, spec.jitter_ms)


def _schedule(tx: Tx, namespace: str, schedule_id: str) -> Row:
    require_namespace(tx, namespace)
    row = tx.one(
        f"SELECT * FROM schedules WHERE namespace = ? AND schedule_id = ?{tx.row_lock_suffix}",
        (namespace, schedule_id),
    )
    if row is None:
        raise NotFoundError(f"schedule {schedule_id!r} does not exist")
    return row


def _record(tx: Tx, row: Row, due: int, action: str, workflow_id: str, run_id: str) -> None:
    ns, sid = row["namespace"], row["schedule_id"]
    tx.run(
        "INSERT INTO schedule_actions (namespace, schedule_id, due_ms, action, workflow_id, "
        "started_run_id, at_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (namespace, schedule_id, due_ms, action) DO NOTHING",
        (ns, sid, due, action, workflow_id, run_id, tx.now_ms()),
    )
    tx.run(
        "DELETE FROM schedule_actions WHERE namespace = ? AND schedule_id = ? AND due_ms < "
        "(SELECT MIN(due_ms) FROM (SELECT due_ms FROM schedule_actions WHERE namespace = ? "
        "AND schedule_id = ? ORDER BY due_ms DESC LIMIT ?) AS recent)",
        (ns, sid, ns, sid, RECENT_ACTIONS),
    )


def _last_run_open(tx: Tx, row: Row) -> Row | None:
    """The schedule's last run if it is open, read under its row lock (TERMINATE_OTHER and
    CANCEL_OTHER write to it)."""
    if not row["last_run_id"]:
        return None
    run = tx.one(
        "SELECT * FROM runs WHERE namespace = ? AND run_id = ? AND status = 'running'"
        f"{tx.row_lock_suffix}",
        (row["namespace"], row["last_run_id"]),
    )
    tx.remember_run(run)
    return run


def _start(tx: Tx, row: Row, due: int) -> str:
    """Starts the due time's run through the ordinary start path; returns the action."""
    ns, sid = row["namespace"], row["schedule_id"]
    workflow_id = run_workflow_id(sid, due)
    request_id = f"schedule:{sid}:{due}"
    version, payload, checked = check_start(
        workflow_id,
        row["workflow_type"],
        row["workflow_version"],
        row["task_queue"],
        bytes(row["input"]),
        None,
    )
    new_run_id = str(uuid.uuid4())
    earlier = record_start_request(tx, ns, workflow_id, request_id, new_run_id)
    if earlier is not None:  # this due time's run exists already (a repeated backfill)
        _record(tx, row, due, "already_running", workflow_id, earlier)
        return "already_running"
    if open_run_of(tx, ns, workflow_id) is not None:
        raise AssertionError("unreachable: a new request id found an open run of its id")
    run_id, _ = create_run(
        tx,
        ns,
        workflow_id,
        row["workflow_type"],
        version,
        row["task_queue"],
        payload,
        request_id,
        None,
        checked,
        run_id=new_run_id,
        request_recorded=True,
    )
    tx.run(
        "UPDATE schedules SET last_workflow_id = ?, last_run_id = ? "
        "WHERE namespace = ? AND schedule_id = ?",
        (workflow_id, run_id, ns, sid),
    )
    _record(tx, row, due, "started", workflow_id, run_id)
    return "started"


def _fire(tx: Tx, row: Row, due: int, overlap: str) -> int:
    """Applies the overlap policy to one due time; returns how many runs started."""
    return 1 if _fire_action(tx, row, due, overlap) == "started" else 0


def _fire_action(tx: Tx, row: Row, due: int, overlap: str) -> str:
    """Applies the overlap policy to one due time; returns the action it recorded (two
    triggers in one millisecond record two actions of one due time, so the action is
    returned, not read back)."""
    ns, sid = row["namespace"], row["schedule_id"]
    open_run = None if overlap == "ALLOW_ALL" else _last_run_open(tx, row)
    if overlap in BUFFERING and (open_run is not None or waiting(tx, ns, sid)):
        # Waits behind the open run, and behind earlier waiting due times (so they start
        # in due order). CANCEL_OTHER also asks the open run to stop; the start still
        # waits for it to close (a cancelled run may run its cleanup first).
        if overlap == "CANCEL_OTHER" and open_run is not None:
            reason = f"cancelled by schedule {sid!r} (overlap CANCEL_OTHER)"
            request_cancel_run(tx, ns, open_run, reason, tx.now_ms())
        if push(tx, ns, sid, due, overlap):
            _record(tx, row, due, "buffered", "", "")
            return "buffered"
        _record(tx, row, due, "skipped", "", "")  # BUFFER_ALL's buffer is full
        return "skipped"
    if open_run is not None:
        if overlap == "SKIP":
            _record(tx, row, due, "skipped", open_run["workflow_id"], open_run["run_id"])
            return "skipped"
        # TERMINATE_OTHER: the open run ends before the new one starts.
        now = tx.now_ms()
        reason = f"terminated by schedule {row['schedule_id']!r} (overlap TERMINATE_OTHER)"
        append_event(
            tx,
            row["namespace"],
            open_run["run_id"],
            now,
            "workflow_terminated",
            history_pb2.WorkflowTerminated(reason=reason),
        )
        close_run(
            tx,
            row["namespace"],
            open_run["run_id"],
            "terminated",
            now,
            failure=failure_bytes(reason, "WorkflowTerminatedError"),
        )
    return _start(tx, row, due)


class _ScheduleOps(_SqlOpsBase):
    """The schedule operations."""

    async def create_schedule(
        self, namespace: str, schedule_id: str, definition: ScheduleDefinition
    ) -> None:
        require(schedule_id, "schedule_id")
        _check(definition)

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            due, fire_at = _slot(schedule_id, definition.spec, now, now)
            inserted = tx.run(
                "INSERT INTO schedules (namespace, schedule_id, workflow_type, "
                "workflow_version, task_queue, input, spec, overlap, catchup_window_ms, "
                "paused, note, anchor_ms, next_due_ms, fire_at_ms, created_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', ?, ?, ?, ?) "
                "ON CONFLICT (namespace, schedule_id) DO NOTHING",
                (
                    namespace,
                    schedule_id,
                    definition.workflow_type,
                    definition.workflow_version,
                    definition.task_queue,
                    definition.input,
                    _spec_json(definition.spec),
                    definition.overlap,
                    definition.catchup_window_ms,
                    now,
                    due,
                    fire_at,
                    now,
                ),
            )
            if not inserted:
                raise InvalidArgumentError(f"schedule {schedule_id!r} already exists")

        await self._write(op)

    async def update_schedule(
        self, namespace: str, schedule_id: str, definition: ScheduleDefinition
    ) -> None:
        _check(definition)

        def op(tx: Tx) -> None:
            row = _schedule(tx, namespace, schedule_id)
            now = tx.now_ms()
            # Due times count from the update: the new spec's, from now on.
            due, fire_at = _slot(schedule_id, definition.spec, now, now)
            paused = bool(row["paused"])
            tx.run(
                "UPDATE schedules SET workflow_type = ?, workflow_version = ?, task_queue = ?, "
                "input = ?, spec = ?, overlap = ?, catchup_window_ms = ?, anchor_ms = ?, "
                "next_due_ms = ?, fire_at_ms = ? WHERE namespace = ? AND schedule_id = ?",
                (
                    definition.workflow_type,
                    definition.workflow_version,
                    definition.task_queue,
                    definition.input,
                    _spec_json(definition.spec),
                    definition.overlap,
                    definition.catchup_window_ms,
                    now,
                    due,
                    None if paused else fire_at,
                    namespace,
                    schedule_id,
                ),
            )
            clear(tx, namespace, schedule_id)  # waiting due times were the old spec's

        await self._write(op)

    async def delete_schedule(self, namespace: str, schedule_id: str) -> None:
        def op(tx: Tx) -> None:
            _schedule(tx, namespace, schedule_id)
            clear(tx, namespace, schedule_id)
            tx.run(
                "DELETE FROM schedule_actions WHERE namespace = ? AND schedule_id = ?",
                (namespace, schedule_id),
            )
            tx.run(
                "DELETE FROM schedules WHERE namespace = ? AND schedule_id = ?",
                (namespace, schedule_id),
            )

        await self._write(op)

    async def pause_schedule(
        self, namespace: str, schedule_id: str, paused: bool, note: str
    ) -> None:
        """Pausing clears the due slot; unpausing sets the next due time after now (due
        times passed while paused are not caught up)."""

        def op(tx: Tx) -> None:
            row = _schedule(tx, namespace, schedule_id)
            now = tx.now_ms()
            fire_at: int | None = None
            due = row["next_due_ms"]
            if not paused:
                due, fire_at = _slot(schedule_id, _spec(row), row["anchor_ms"], now)
            tx.run(
                "UPDATE schedules SET paused = ?, note = ?, next_due_ms = ?, fire_at_ms = ? "
                "WHERE namespace = ? AND schedule_id = ?",
                (1 if paused else 0, note, due, fire_at, namespace, schedule_id),
            )

        await self._write(op)

    async def trigger_schedule(self, namespace: str, schedule_id: str) -> str:
        """Fires the schedule now (its overlap policy applies); returns the action."""

        def op(tx: Tx) -> str:
            row = _schedule(tx, namespace, schedule_id)
            now = tx.now_ms()
            return _fire_action(tx, row, now, row["overlap"])

        return await self._write(op)

    async def backfill_schedule(
        self, namespace: str, schedule_id: str, start_ms: int, end_ms: int
    ) -> int:
        """Starts a run for every due time in [start_ms, end_ms], whatever is open
        (ALLOW_ALL); a due time whose run exists already is not started again. Returns how
        many runs started."""
        if end_ms < start_ms:
            raise InvalidArgumentError("a backfill's end is before its start")

        def op(tx: Tx) -> int:
            row = _schedule(tx, namespace, schedule_id)
            dues = due_times(_spec(row), row["anchor_ms"], start_ms, end_ms)
            return sum(1 for due in dues if _start(tx, row, due) == "started")

        return await self._write(op)

    async def describe_schedule(self, namespace: str, schedule_id: str) -> ScheduleInfo:
        def op(tx: Tx) -> ScheduleInfo:
            require_namespace(tx, namespace)
            row = tx.one(
                "SELECT * FROM schedules WHERE namespace = ? AND schedule_id = ?",
                (namespace, schedule_id),
            )
            if row is None:
                raise NotFoundError(f"schedule {schedule_id!r} does not exist")
            return _info(tx, row, with_details=True)

        return await self._read(op)

    async def list_schedules(
        self, namespace: str, limit: int = 100, after: str = ""
    ) -> list[ScheduleInfo]:
        """Schedules by id, ``limit`` at most, those after ``after`` (paging)."""
        if not 0 < limit <= LIST_LIMIT_MAX:
            raise InvalidArgumentError(f"limit must be 1..{LIST_LIMIT_MAX}")

        def op(tx: Tx) -> list[ScheduleInfo]:
            require_namespace(tx, namespace)
            rows = tx.all(
                "SELECT * FROM schedules WHERE namespace = ? AND schedule_id > ? "
                "ORDER BY schedule_id LIMIT ?",
                (namespace, after, limit),
            )
            return [_info(tx, row, with_details=False) for row in rows]

        return await self._read(op)

    async def fire_schedules(self) -> ScheduleFiring:
        """Starts every waiting (buffered) due time whose run closed, then fires every due
        schedule slot, once cluster-wide: in this order, so a due time coming in the same
        pass as the close waits behind the buffered ones."""

        def op(tx: Tx) -> ScheduleFiring:
            now = tx.now_ms()
            started = 0
            for ns, sid in ready(tx, FIRE_BATCH):
                started += _start_buffered(tx, ns, sid)
            for row in tx.all(
                "SELECT * FROM schedules WHERE fire_at_ms IS NOT NULL AND fire_at_ms <= ? "
                "ORDER BY fire_at_ms LIMIT ?",
                (now, FIRE_BATCH),
            ):
                started += _fire_due(tx, row, now)
            nxt = tx.value("SELECT MIN(fire_at_ms) FROM schedules")
            return ScheduleFiring(
                now, started, None if nxt is None else int(nxt), blocking(tx, WAITING_ON_MAX)
            )

        return await self._write(op)


def _start_buffered(tx: Tx, namespace: str, schedule_id: str) -> int:
    """Starts the schedule's oldest waiting due time if its last run is (still) closed."""
    # The schedule's row lock orders this against another replica's pass: whichever comes
    # second reads the run the first one started, and finds it open.
    row = tx.one(
        f"SELECT * FROM schedules WHERE namespace = ? AND schedule_id = ?{tx.row_lock_suffix}",
        (namespace, schedule_id),
    )
    if row is None or row["paused"] or _last_run_open(tx, row) is not None:
        return 0
    due = take_oldest(tx, namespace, schedule_id)
    if due is None:
        return 0
    return 1 if _start(tx, row, due) == "started" else 0


def _fire_due(tx: Tx, row: Row, now: int) -> int:
    """Fires one schedule's due times up to now (a bounded batch of them)."""
    spec, sid = _spec(row), row["schedule_id"]
    due, fire_at, started = row["next_due_ms"], row["fire_at_ms"], 0
    window = row["catchup_window_ms"]
    claimed_from = fire_at
    fired: list[int] = []
    missed: list[int] = []
    while fire_at <= now and len(fired) < FIRE_BATCH:
        if now - due > window:
            # Missed by more than the catchup window: each is recorded (up to the number
            # describe keeps: a long outage of a short interval is not walked due time by
            # due time), then the slot skips to the first due time inside the window.
            while now - due > window and len(missed) < RECENT_ACTIONS:
                missed.append(due)
                due = next_due(spec, row["anchor_ms"], due)
            if now - due > window:
                due = next_due(spec, row["anchor_ms"], now - window - 1)
            fire_at = due + jitter(sid, due, spec.jitter_ms)
            continue
        fired.append(due)
        due, fire_at = _slot(sid, spec, row["anchor_ms"], due)
    # The fenced claim: only the pass that read this slot moves it (and records what it
    # missed: a pass whose claim lost records nothing).
    if not tx.run(
        "UPDATE schedules SET next_due_ms = ?, fire_at_ms = ? WHERE namespace = ? "
        "AND schedule_id = ? AND fire_at_ms = ?",
        (due, fire_at, row["namespace"], sid, claimed_from),
    ):
        return 0
    for one in missed:
        _record(tx, row, one, "missed", "", "")
    for one in fired:
        # Re-read: the previous due time may have changed last_run_id.
        current = tx.one(
            "SELECT * FROM schedules WHERE namespace = ? AND schedule_id = ?",
            (row["namespace"], sid),
        )
        assert current is not None
        started += _fire(tx, current, one, row["overlap"])
    return started


def _info(tx: Tx, row: Row, with_details: bool) -> ScheduleInfo:
    times: list[int] = []
    actions: list[ScheduleAction] = []
    if with_details:
        if not row["paused"]:
            due = row["next_due_ms"]
            spec = _spec(row)
            for _ in range(NEXT_TIMES):
                times.append(due)
                due = next_due(spec, row["anchor_ms"], due)
        actions = [
            ScheduleAction(
                a["due_ms"], a["action"], a["workflow_id"], a["started_run_id"], a["at_ms"]
            )
            for a in tx.all(
                "SELECT * FROM schedule_actions WHERE namespace = ? AND schedule_id = ? "
                "ORDER BY due_ms DESC, at_ms DESC",
                (row["namespace"], row["schedule_id"]),
            )
        ]
    return ScheduleInfo(
        schedule_id=row["schedule_id"],
        definition=_definition(row),
        paused=bool(row["paused"]),
        note=row["note"],
        created_at_ms=row["created_at_ms"],
        next_due_ms=times,
        recent_actions=actions,
    )
