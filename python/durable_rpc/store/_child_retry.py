"""Child workflow retries: a failed child run started with a retry policy
(StartChildWorkflow.retry_policy, copied to its WorkflowStarted with the attempt) is
followed, in its closing transaction, by a new run of the same child workflow id whose
first workflow task waits until the policy's backoff passed on the database clock. The
parent hears only the final outcome (``_run_close.close_run``, handed this module's
``retry_child_run`` by the FailWorkflow decision that closes the run)."""

from __future__ import annotations

from durable_rpc.store._build_pins import carried_pin
from durable_rpc.store._logic import retry_delay_ms
from durable_rpc.store._runs import CheckedStart, create_run
from durable_rpc.store._search import parse_search_attributes
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import history_pb2, payload_pb2


def retry_child_run(tx: Tx, namespace: str, run_id: str, failure: bytes | None, now: int) -> bool:
    """Starts the next attempt of child run ``run_id``, which just closed as failed, when
    its retry policy allows one; returns whether it did.

    The new run keeps the workflow id, type, version, task queue, input, memo, search
    attributes given at start, trace context, parent link, build pin, priority and
    fairness key; the run timeout
    applies afresh to each attempt, the execution timeout spans them all (an attempt
    that would start after it is not made: the failure is final)."""
    first = tx.one(
        "SELECT data FROM history WHERE namespace = ? AND run_id = ? AND event_id = 1",
        (namespace, run_id),
    )
    if first is None:
        return False
    started = history_pb2.HistoryEvent.FromString(bytes(first["data"])).workflow_started
    if not started.HasField("retry_policy"):
        return False
    run = tx.one(
        f"SELECT * FROM runs WHERE namespace = ? AND run_id = ?{tx.row_lock_suffix}",
        (namespace, run_id),
    )
    assert run is not None
    attempt = started.attempt or 1
    deadline_ms: int | None = None
    if started.HasField("execution_timeout"):
        deadline_ms = int(run["start_time_ms"]) + started.execution_timeout.ToMilliseconds()
    delay = retry_delay_ms(
        started.retry_policy,
        attempt,
        payload_pb2.Failure.FromString(failure or b""),
        now,
        deadline_ms,
    )
    if delay is None:
        return False
    attrs = (
        started.search_attributes.SerializeToString()
        if started.HasField("search_attributes")
        else None
    )
    checked = CheckedStart(
        memo=started.memo.SerializeToString() if started.HasField("memo") else None,
        search_rows=parse_search_attributes(attrs),
        search_attributes=attrs,
        execution_timeout_ms=None if deadline_ms is None else deadline_ms - now,
        run_timeout_ms=(
            started.run_timeout.ToMilliseconds() if started.HasField("run_timeout") else None
        ),
    )
    new_run_id, _ = create_run(
        tx,
        namespace,
        run["workflow_id"],
        run["workflow_type"],
        run["workflow_version"],
        run["task_queue"],
        started.input,
        "",
        dict(started.trace_context),
        checked,
        retry=(started.retry_policy, attempt + 1),
        parent=(
            run["parent_run_id"],
            run["parent_seq"],
            started.parent_workflow_id,
            run["parent_close_policy"],
        ),
        build_id=carried_pin(run),
        fair=(run["priority"], run["fairness_key"]),
    )
    # The backoff: the attempt's first workflow task is due, not queued (process_due
    # queues it on the database clock, as an activity retry's).
    due = now + delay
    tx.run(
        "UPDATE tasks SET state = 'waiting', due_ms = ?, visible_at_ms = ? "
        "WHERE namespace = ? AND run_id = ? AND kind = 'workflow' AND state = 'queued'",
        (due, due, namespace, new_run_id),
    )
    tx.notes.due.add(due)
    return True
