"""Child workflows: starting a child inside the parent's task completion and asking
it to cancel. What happens when a child or a parent closes is in ``_run_close.close_run``
(the parent learns in the child's closing transaction; the parent-close policy is
applied in the parent's)."""

from __future__ import annotations

from durable_rpc.errors import DefinitionRemovedError, InvalidArgumentError, SignalNotDeclaredError
from durable_rpc.store._declared_signals import DECLARED_SIGNALS, undeclared
from durable_rpc.store._logic import validate_retry_policy
from durable_rpc.store._records import StartOptions
from durable_rpc.store._removed import definition_removed, removed_message
from durable_rpc.store._runs import check_start_options, create_run, deliver_signal, open_run_of
from durable_rpc.store._shared import (
    PARENT_CLOSE_POLICIES,
    append_event,
    decision_input,
    request_cancel_run,
    require,
    version_or_default,
)
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2, workflow_task_pb2


def start_child(
    tx: Tx, namespace: str, parent: Row, command: workflow_task_pb2.Command, now: int
) -> None:
    """Records ChildWorkflowInitiated on the parent and starts the child run (same
    namespace); ChildWorkflowStarted, or ChildWorkflowStartFailed when a run of the
    child's id is open, follows the decision's command events (``decision_input``). Both
    are input events: the caller's end-of-task check queues the parent's next task."""
    spec = command.start_child_workflow
    require(spec.workflow_type, "start_child_workflow.workflow_type")
    require(spec.workflow_id, "start_child_workflow.workflow_id")
    policy = spec.parent_close_policy or "TERMINATE"
    if policy not in PARENT_CLOSE_POLICIES:
        raise InvalidArgumentError(
            f"command seq {command.seq}: unknown parent_close_policy {policy!r}"
        )
    retry = None
    if spec.HasField("retry_policy"):
        validate_retry_policy(spec.retry_policy, f"command seq {command.seq}")
        retry = (spec.retry_policy, 1)
    options = check_start_options(
        StartOptions(
            memo=spec.memo.SerializeToString() if spec.HasField("memo") else None,
            search_attributes=(
                spec.search_attributes.SerializeToString()
                if spec.HasField("search_attributes")
                else None
            ),
            execution_timeout_ms=(
                spec.execution_timeout.ToMilliseconds()
                if spec.HasField("execution_timeout")
                else None
            ),
            run_timeout_ms=(
                spec.run_timeout.ToMilliseconds() if spec.HasField("run_timeout") else None
            ),
        )
    )
    parent_run_id: str = parent["run_id"]
    queue = spec.task_queue or parent["task_queue"]
    version = version_or_default(spec.workflow_version)
    append_event(
        tx,
        namespace,
        parent_run_id,
        now,
        "child_workflow_initiated",
        history_pb2.ChildWorkflowInitiated(
            seq=command.seq,
            workflow_type=spec.workflow_type,
            workflow_version=version,
            workflow_id=spec.workflow_id,
            task_queue=queue,
            input=spec.input,
            parent_close_policy=policy,
            retry_policy=spec.retry_policy if retry is not None else None,
        ),
    )
    existing = open_run_of(tx, namespace, spec.workflow_id)
    if existing is None and definition_removed(tx, namespace, spec.workflow_type, version):
        # As a client's start is refused (create_run), the parent's awaits fail instead
        # of the parent's whole decision.
        decision_input(
            tx,
            namespace,
            parent_run_id,
            now,
            "child_workflow_start_failed",
            history_pb2.ChildWorkflowStartFailed(
                seq=command.seq,
                workflow_id=spec.workflow_id,
                reason=DefinitionRemovedError.reason,
                message=removed_message(spec.workflow_type, version, "started"),
            ),
        )
        return
    if existing is not None:
        decision_input(
            tx,
            namespace,
            parent_run_id,
            now,
            "child_workflow_start_failed",
            history_pb2.ChildWorkflowStartFailed(
                seq=command.seq,
                workflow_id=spec.workflow_id,
                reason="WORKFLOW_ALREADY_STARTED",
                message=f"workflow {spec.workflow_id!r} already has an open run "
                f"({existing['run_id']})",
            ),
        )
        return
    child_run_id, _ = create_run(
        tx,
        namespace,
        spec.workflow_id,
        spec.workflow_type,
        version,
        queue,
        spec.input,
        "",
        dict(spec.trace_context) or None,
        options,
        retry=retry,
        parent=(parent_run_id, command.seq, parent["workflow_id"], policy),
        # A child is as urgent as its parent and shares its fairness key.
        fair=(parent["priority"], parent["fairness_key"]),
    )
    decision_input(
        tx,
        namespace,
        parent_run_id,
        now,
        "child_workflow_started",
        history_pb2.ChildWorkflowStarted(
            seq=command.seq, workflow_id=spec.workflow_id, run_id=child_run_id
        ),
    )


def request_child_cancel(
    tx: Tx, namespace: str, parent: Row, command: workflow_task_pb2.Command, now: int
) -> None:
    """Records ChildCancelRequested and appends CancelRequested to the child's open run
    (the last of its continue-as-new chain); a child already closed is left alone (its
    close event reaches the parent anyway)."""
    child_seq = command.request_cancel_child_workflow.child_seq
    append_event(
        tx,
        namespace,
        parent["run_id"],
        now,
        "child_cancel_requested",
        history_pb2.ChildCancelRequested(seq=child_seq),
    )
    child = tx.one(
        "SELECT * FROM runs WHERE namespace = ? AND parent_run_id = ? AND parent_seq = ? "
        f"AND status = 'running'{tx.row_lock_suffix}",
        (namespace, parent["run_id"], child_seq),
    )
    if child is not None:
        request_cancel_run(tx, namespace, child, "parent requested cancellation", now)


def _refusal(
    target: Row | None, spec: workflow_task_pb2.SignalExternalWorkflow
) -> tuple[str, str] | None:
    """(reason, message) of a signal to ``target`` that cannot be delivered."""
    where = f"workflow {spec.workflow_id!r}" + (
        f" with run id {spec.run_id!r}" if spec.run_id else ""
    )
    if target is None:
        return "NOT_FOUND", f"no run of {where}"
    if target["status"] != "running":
        return "WORKFLOW_NOT_RUNNING", f"no open run of {where}"
    why = undeclared(target["declared_signals"], spec.signal_name, target["run_id"])
    return None if why is None else (SignalNotDeclaredError.reason, why)


def signal_external(
    tx: Tx, namespace: str, sender: Row, command: workflow_task_pb2.Command, now: int
) -> None:
    """Records ExternalSignalInitiated and delivers the signal to its target run (same
    namespace: ``run_id``, or the latest run of ``workflow_id``), deduplicated by the
    sender's run and seq. ExternalSignalDelivered, or ExternalSignalFailed when there is
    no such run or it is closed, follows the decision's command events. A signal to the
    sender itself is an input of its own too, so it follows them as well."""
    spec = command.signal_external_workflow
    require(spec.workflow_id, "signal_external_workflow.workflow_id")
    require(spec.signal_name, "signal_external_workflow.signal_name")
    sender_run_id: str = sender["run_id"]
    append_event(
        tx,
        namespace,
        sender_run_id,
        now,
        "external_signal_initiated",
        history_pb2.ExternalSignalInitiated(
            seq=command.seq,
            workflow_id=spec.workflow_id,
            run_id=spec.run_id,
            signal_name=spec.signal_name,
            input=spec.input,
        ),
    )
    target = tx.one(
        f"SELECT run_id, status, task_queue, {DECLARED_SIGNALS} FROM runs "
        "WHERE namespace = ? AND workflow_id = ?"
        + (" AND run_id = ?" if spec.run_id else "")
        + f" ORDER BY id DESC LIMIT 1{tx.row_lock_suffix}",
        (namespace, spec.workflow_id, *((spec.run_id,) if spec.run_id else ())),
    )
    refused = _refusal(target, spec)
    if refused is not None:
        reason, message = refused
        failed = history_pb2.ExternalSignalFailed(seq=command.seq, reason=reason, message=message)
        decision_input(tx, namespace, sender_run_id, now, "external_signal_failed", failed)
        return
    assert target is not None
    target_run_id: str = target["run_id"]
    request_id = f"{sender_run_id}/{command.seq}"

    def deliver() -> None:
        deliver_signal(
            tx,
            namespace,
            target_run_id,
            target["task_queue"],
            spec.signal_name,
            spec.input,
            request_id,
        )

    if target_run_id == sender_run_id:
        tx.decision_inputs.append(deliver)
    else:
        deliver()
    decision_input(
        tx,
        namespace,
        sender_run_id,
        now,
        "external_signal_delivered",
        history_pb2.ExternalSignalDelivered(seq=command.seq, run_id=target_run_id),
    )
