"""Run creation and signal delivery inside a transaction, shared by start, signal and
signal-with-start so the three can never disagree on what a start or a signal writes."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf import duration_pb2

from durable_rpc.errors import DefinitionRemovedError, InternalError, InvalidArgumentError
from durable_rpc.store._admission import ADMISSION_PROBE, MAX_CONCURRENCY_KEY
from durable_rpc.store._admission_start import admit_new_run
from durable_rpc.store._build_pins import carried_pin
from durable_rpc.store._fairness import DEFAULT_PRIORITY, check_fairness_key, check_priority
from durable_rpc.store._logic import parse_payload
from durable_rpc.store._records import StartOptions
from durable_rpc.store._removed import removed_message
from durable_rpc.store._run_close import close_run
from durable_rpc.store._search import (
    SearchRow,
    parse_memo,
    parse_search_attributes,
    read_search_attributes,
    write_search_attributes,
)
from durable_rpc.store._shared import (
    append_event,
    ensure_workflow_task,
    require,
    version_or_default,
)
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import (
    history_pb2,
    options_pb2,
    payload_pb2,
    search_attributes_pb2,
    workflow_task_pb2,
)


@dataclass(frozen=True, slots=True)
class CheckedStart:
    """StartOptions after validation (done before the transaction)."""

    memo: bytes | None
    search_rows: list[SearchRow]
    search_attributes: bytes | None
    execution_timeout_ms: int | None
    run_timeout_ms: int | None
    priority: int = DEFAULT_PRIORITY
    fairness_key: str | None = None
    concurrency_key: str | None = None


def check_start_options(options: StartOptions | None) -> CheckedStart:
    options = options or StartOptions()
    for what, value in (
        ("execution_timeout", options.execution_timeout_ms),
        ("run_timeout", options.run_timeout_ms),
    ):
        if value is not None and value < 0:
            raise InvalidArgumentError(f"{what} must not be negative")
    key = options.concurrency_key or None
    if key is not None and len(key) > MAX_CONCURRENCY_KEY:
        raise InvalidArgumentError(
            f"concurrency_key must be at most {MAX_CONCURRENCY_KEY} characters, got {len(key)}"
        )
    return CheckedStart(
        memo=parse_memo(options.memo),
        search_rows=parse_search_attributes(options.search_attributes),
        search_attributes=options.search_attributes or None,
        execution_timeout_ms=options.execution_timeout_ms or None,
        run_timeout_ms=options.run_timeout_ms or None,
        priority=check_priority(options.priority),
        fairness_key=check_fairness_key(options.fairness_key),
        concurrency_key=key,
    )


def check_start(
    workflow_id: str,
    workflow_type: str,
    workflow_version: str,
    task_queue: str,
    input: bytes,
    options: StartOptions | None,
) -> tuple[str, payload_pb2.Payload, CheckedStart]:
    """The checks every way of starting a run makes before its transaction: (version,
    start payload, checked options). Raises InvalidArgumentError."""
    require(workflow_id, "workflow_id")
    require(workflow_type, "workflow_type")
    require(task_queue, "task_queue")
    return (
        version_or_default(workflow_version),
        parse_payload(input, "input"),
        check_start_options(options),
    )


def earlier_start(tx: Tx, namespace: str, workflow_id: str, request_id: str) -> str | None:
    """The run an earlier start with ``request_id`` created (None: no such start)."""
    if not request_id:
        return None
    row = tx.one(
        "SELECT run_id FROM start_requests "
        "WHERE namespace = ? AND workflow_id = ? AND request_id = ?",
        (namespace, workflow_id, request_id),
    )
    return None if row is None else str(row["run_id"])


def record_start_request(
    tx: Tx, namespace: str, workflow_id: str, request_id: str, run_id: str
) -> str | None:
    """Records that ``request_id`` starts ``run_id``, unless an earlier start with it did:
    then returns that start's run. One statement in the usual case; on PostgreSQL, a
    concurrent start of the same request is waited for (the unique key) and then seen."""
    if not request_id:
        return None
    inserted = tx.one(
        "INSERT INTO start_requests (namespace, workflow_id, request_id, run_id) "
        "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING run_id",
        (namespace, workflow_id, request_id, run_id),
    )
    if inserted is not None:
        return None
    earlier = earlier_start(tx, namespace, workflow_id, request_id)
    if earlier is None:  # the conflicting record is committed, and records are never deleted
        raise InternalError(f"start request {request_id!r} conflicts but cannot be read")
    return earlier


def open_run_of(tx: Tx, namespace: str, workflow_id: str, columns: str = "") -> Row | None:
    """The open run of ``workflow_id`` (locked for the rest of the transaction), if any;
    ``columns``: select-list items read with it (as ``find_run``'s)."""
    extra = f", {columns}" if columns else ""
    run = tx.one(
        f"SELECT *{extra} FROM runs WHERE namespace = ? AND workflow_id = ? "
        f"AND status = 'running'{tx.row_lock_suffix}",
        (namespace, workflow_id),
    )
    tx.remember_run(run)
    return run


def create_run(
    tx: Tx,
    namespace: str,
    workflow_id: str,
    workflow_type: str,
    version: str,
    task_queue: str,
    payload: payload_pb2.Payload,
    request_id: str,
    trace_context: Mapping[str, str] | None,
    start: CheckedStart | None = None,
    run_id: str | None = None,
    continued_from_run_id: str = "",
    retry: tuple[options_pb2.RetryPolicy, int] | None = None,
    parent: tuple[str, int, str, str] | None = None,
    request_recorded: bool = False,
    build_id: str | None = None,
    random_seed_run_id: str = "",
    fair: tuple[int, str | None] | None = None,
    admitted: bool = True,
) -> tuple[str, int]:
    """Insert a running run with its WorkflowStarted event and first workflow task;
    returns (run_id, now). The caller checked that no run of the id is open.
    ``retry`` (policy, attempt): a child's retry policy and which attempt this run is
    (``_child_retry``).
    ``run_id`` (default: a fresh UUID) and ``continued_from_run_id`` are given by
    continue-as-new. ``parent`` (run id, seq, workflow id, close policy) links a child
    workflow to its parent. ``request_recorded``: the caller already recorded
    ``request_id`` (``record_start_request``). ``build_id``: the build the run is pinned
    to from its start (continue-as-new of a pinned run; None: undecided, ``_build_pins``).
    ``fair``: (priority, fairness key) of a child, a continued or a redriven run (its
    parent's / predecessor's; default: ``start``'s).
    ``random_seed_run_id``: a redriven run's (WorkflowStarted.random_seed_run_id).
    ``admitted=False``: a client's start, which its namespace's admission policy (if
    any) admits, defers or refuses (``_admission``); children and continue-as-new pass
    True (always admitted, counted)."""
    now = tx.now_ms()
    run_id = run_id or str(uuid.uuid4())
    # The definition's fingerprint (registered by workers; '' if none is) and whether an
    # operator removed it are looked up by the insert itself.
    inserted = tx.one(
        "INSERT INTO runs (namespace, run_id, workflow_id, workflow_type, "
        "workflow_version, task_queue, status, start_time_ms, history_length, "
        "definition_fingerprint, cancel_requested, wft_attempt, build_id) "
        "VALUES (?, ?, ?, ?, ?, ?, 'running', ?, 0, COALESCE((SELECT fingerprint FROM "
        "definitions WHERE namespace = ? AND name = ? AND version = ?), ''), 0, 1, ?) "
        "RETURNING definition_fingerprint, (SELECT d.removed_at_ms FROM definitions d "
        "WHERE d.namespace = runs.namespace AND d.name = runs.workflow_type "
        f"AND d.version = runs.workflow_version) AS removed_at_ms, {ADMISSION_PROBE}",
        (
            namespace,
            run_id,
            workflow_id,
            workflow_type,
            version,
            task_queue,
            now,
            namespace,
            workflow_type,
            version,
            build_id,
        ),
    )
    assert inserted is not None
    if inserted["removed_at_ms"] is not None:
        # The transaction rolls back: nothing of the run is kept.
        raise DefinitionRemovedError(removed_message(workflow_type, version, "started"))
    key = start.concurrency_key if start is not None else None
    if key is not None:  # only a keyed run pays this write
        tx.run(
            "UPDATE runs SET concurrency_key = ? WHERE namespace = ? AND run_id = ?",
            (key, namespace, run_id),
        )
    if not admitted and inserted["admission_on"] and admit_new_run(tx, namespace, run_id, key):
        tx.deferred_starts += 1
    fingerprint = inserted["definition_fingerprint"]
    tx.remember_history_length(namespace, run_id, 0, 0)
    if fair is None and start is not None:
        fair = (start.priority, start.fairness_key)
    if fair is not None and (fair[0] != DEFAULT_PRIORITY or fair[1] is not None):
        # Only a run with a priority or key set costs this write (the columns' defaults
        # are the rest's); its tasks copy both (ensure_workflow_task, _queue_activity).
        tx.run(
            "UPDATE runs SET priority = ?, fairness_key = ? WHERE namespace = ? AND run_id = ?",
            (fair[0], fair[1], namespace, run_id),
        )
    started_extra: dict[str, object] = {}
    if random_seed_run_id:
        started_extra["random_seed_run_id"] = random_seed_run_id
    if parent is not None:
        tx.run(
            "UPDATE runs SET parent_run_id = ?, parent_seq = ?, parent_close_policy = ? "
            "WHERE namespace = ? AND run_id = ?",
            (parent[0], parent[1], parent[3], namespace, run_id),
        )
        started_extra.update(
            parent_run_id=parent[0], parent_seq=parent[1], parent_workflow_id=parent[2]
        )
    if retry is not None:
        started_extra.update(retry_policy=retry[0], attempt=retry[1])
    if start is not None:
        limits = [
            (ms, kind)
            for ms, kind in (
                (start.execution_timeout_ms, "execution"),
                (start.run_timeout_ms, "run"),
            )
            if ms
        ]
        deadline = min(limits) if limits else None
        if start.memo or deadline is not None:
            tx.run(
                "UPDATE runs SET memo = ?, deadline_ms = ?, timeout_kind = ? "
                "WHERE namespace = ? AND run_id = ?",
                (
                    start.memo,
                    None if deadline is None else now + deadline[0],
                    None if deadline is None else deadline[1],
                    namespace,
                    run_id,
                ),
            )
            if deadline is not None:
                tx.notes.due.add(now + deadline[0])
        write_search_attributes(tx, namespace, run_id, start.search_rows)
        if start.memo:
            started_extra["memo"] = search_attributes_pb2.Memo.FromString(start.memo)
        if start.search_attributes:
            started_extra["search_attributes"] = search_attributes_pb2.SearchAttributes.FromString(
                start.search_attributes
            )
        for field, ms in (
            ("execution_timeout", start.execution_timeout_ms),
            ("run_timeout", start.run_timeout_ms),
        ):
            if ms:
                timeout = duration_pb2.Duration()
                timeout.FromMilliseconds(ms)
                started_extra[field] = timeout
    if request_id and not request_recorded:
        tx.run(
            "INSERT INTO start_requests (namespace, workflow_id, request_id, run_id) "
            "VALUES (?, ?, ?, ?)",
            (namespace, workflow_id, request_id, run_id),
        )
    append_event(
        tx,
        namespace,
        run_id,
        now,
        "workflow_started",
        history_pb2.WorkflowStarted(
            workflow_type=workflow_type,
            workflow_version=version,
            workflow_id=workflow_id,
            run_id=run_id,
            task_queue=task_queue,
            input=payload,
            definition_fingerprint=fingerprint or "",
            request_id=request_id,
            trace_context=trace_context or {},
            continued_from_run_id=continued_from_run_id,
            **started_extra,  # type: ignore[arg-type]
        ),
    )
    ensure_workflow_task(tx, namespace, run_id, task_queue, now)
    return run_id, now


def signal_seen(tx: Tx, namespace: str, run_id: str, request_id: str) -> bool:
    """True when a signal with ``request_id`` was already delivered to the run."""
    if not request_id:
        return False
    row = tx.one(
        "SELECT request_id FROM signal_requests "
        "WHERE namespace = ? AND run_id = ? AND request_id = ?",
        (namespace, run_id, request_id),
    )
    return row is not None


def deliver_signal(
    tx: Tx,
    namespace: str,
    run_id: str,
    task_queue: str,
    signal_name: str,
    payload: payload_pb2.Payload,
    request_id: str,
) -> None:
    """Append SignalReceived to an open run (remembering ``request_id``) and make sure a
    workflow task will deliver it."""
    now = tx.now_ms()
    if request_id:
        tx.run(
            "INSERT INTO signal_requests (namespace, run_id, request_id, created_at_ms) "
            "VALUES (?, ?, ?, ?)",
            (namespace, run_id, request_id, now),
        )
    append_event(
        tx,
        namespace,
        run_id,
        now,
        "signal_received",
        history_pb2.SignalReceived(signal_name=signal_name, input=payload, request_id=request_id),
    )
    ensure_workflow_task(tx, namespace, run_id, task_queue, now)


def continue_as_new(
    tx: Tx, namespace: str, run: Row, command: workflow_task_pb2.ContinueAsNew, now: int
) -> str:
    """Closes ``run`` as continued_as_new and starts its successor in the same
    transaction; returns the new run id.

    The new run keeps the workflow id, type, version, task queue, memo, trace context
    and the run's current search attributes (upserts included), and starts a fresh
    history; the command's ``task_queue`` / ``workflow_type`` (with its
    ``workflow_version``, default "1") override the queue and the type. A routed run
    keeps no build pin (the pinned build may not serve that queue or type). The run
    timeout applies afresh to each run; the execution timeout spans the chain (the new
    run gets what is left of it).
    """
    payload = command.input
    if command.workflow_version and not command.workflow_type:
        raise InvalidArgumentError(
            "continue_as_new: workflow_version "
            f"{command.workflow_version!r} needs a workflow_type (empty = this run's type "
            "and version)"
        )
    workflow_type: str = command.workflow_type or run["workflow_type"]
    version: str = (
        version_or_default(command.workflow_version)
        if command.workflow_type
        else run["workflow_version"]
    )
    task_queue: str = command.task_queue or run["task_queue"]
    routed = bool(command.task_queue or command.workflow_type)
    old_run_id: str = run["run_id"]
    first = tx.one(
        "SELECT data FROM history WHERE namespace = ? AND run_id = ? AND event_id = 1",
        (namespace, old_run_id),
    )
    started = history_pb2.WorkflowStarted()
    if first is not None:
        started = history_pb2.HistoryEvent.FromString(bytes(first["data"])).workflow_started
    attrs = read_search_attributes(tx, namespace, [old_run_id]).get(old_run_id)
    execution_ms: int | None = None
    if started.HasField("execution_timeout"):
        spent = now - int(run["start_time_ms"])
        execution_ms = max(1, started.execution_timeout.ToMilliseconds() - spent)
    run_ms = started.run_timeout.ToMilliseconds() if started.HasField("run_timeout") else None
    # The run's current memo, as for search attributes: read again, since an upsert_memo
    # of this same decision may have changed it after ``run`` was read.
    current = tx.one(
        "SELECT memo FROM runs WHERE namespace = ? AND run_id = ?", (namespace, old_run_id)
    )
    memo = bytes(current["memo"]) if current is not None and current["memo"] else None
    checked = CheckedStart(
        memo=memo or None,
        search_rows=parse_search_attributes(attrs),
        search_attributes=attrs,
        execution_timeout_ms=execution_ms,
        run_timeout_ms=run_ms or None,
        # The successor is the same run of its key: it keeps the key's room.
        concurrency_key=run["concurrency_key"],
    )
    new_run_id = str(uuid.uuid4())
    append_event(
        tx,
        namespace,
        old_run_id,
        now,
        "workflow_continued_as_new",
        history_pb2.WorkflowContinuedAsNew(
            new_run_id=new_run_id,
            input=payload,
            task_queue=command.task_queue,
            workflow_type=command.workflow_type,
            workflow_version=version if command.workflow_type else "",
        ),
    )
    close_run(tx, namespace, old_run_id, "continued_as_new", now)
    create_run(
        tx,
        namespace,
        run["workflow_id"],
        workflow_type,
        version,
        task_queue,
        payload,
        "",
        dict(started.trace_context),
        checked,
        run_id=new_run_id,
        continued_from_run_id=old_run_id,
        parent=(
            (
                run["parent_run_id"],
                run["parent_seq"],
                started.parent_workflow_id,
                run["parent_close_policy"],
            )
            if run["parent_run_id"]
            else None
        ),
        build_id=None if routed else carried_pin(run),
        fair=(run["priority"], run["fairness_key"]),
    )
    return new_run_id
