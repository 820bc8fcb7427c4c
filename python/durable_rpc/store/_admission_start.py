"""Namespace admission at a start (``_admission``): the new run admitted, deferred or
refused, and a concurrency key's CANCEL_OLDEST, which closes a waiting run or asks an
admitted one to cancel. Closing runs (``_run_close``) admits waiting runs in turn, so
this decision sits above it and the rest of admission below."""

from __future__ import annotations

from durable_rpc.errors import AdmissionLimitError, ConcurrencyKeyLimitError
from durable_rpc.store._admission import (
    admit_waiting,
    bucket_tokens,
    counts,
    locked_policy,
    refusal,
    save_bucket,
)
from durable_rpc.store._logic import failure_bytes
from durable_rpc.store._run_close import close_run
from durable_rpc.store._shared import append_event, request_cancel_run
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import history_pb2


def _key_open(tx: Tx, namespace: str, key: str) -> int:
    """Open runs of a concurrency key, admitted or waiting."""
    return int(
        tx.value(
            "SELECT count(*) FROM runs WHERE namespace = ? AND concurrency_key = ? "
            "AND status = 'running'",
            (namespace, key),
        )
    )


def cancel_waiting_run(tx: Tx, namespace: str, run_id: str, reason: str) -> None:
    """Closes a run not yet admitted as cancelled, at once: none of its code ever ran, so
    nothing needs to learn of it; it held no room, so it frees none."""
    now = tx.now_ms()
    append_event(tx, namespace, run_id, now, "workflow_cancelled", history_pb2.WorkflowCancelled())
    failure = failure_bytes(reason or "cancelled before admission", "CancelledError")
    close_run(tx, namespace, run_id, "cancelled", now, failure=failure)


def _cancel_oldest(tx: Tx, namespace: str, key: str, new_run_id: str) -> None:
    """CANCEL_OLDEST: the key's oldest open run not already being cancelled makes room for
    ``new_run_id``: closed at once if not yet admitted, else asked to cancel (its code
    cleans up; its close admits the new run)."""
    oldest = tx.one(
        "SELECT * FROM runs WHERE namespace = ? AND concurrency_key = ? AND status = 'running' "
        "AND run_id <> ? AND (admission IS NOT NULL OR cancel_requested = 0) "
        f"ORDER BY id LIMIT 1{tx.row_lock_suffix}",
        (namespace, key, new_run_id),
    )
    if oldest is None:  # every older run of the key is being cancelled already
        return
    reason = f"cancelled by concurrency key {key!r} (CANCEL_OLDEST): run {new_run_id} started"
    if oldest["admission"] is not None:
        cancel_waiting_run(tx, namespace, oldest["run_id"], reason)
    else:
        tx.remember_run(oldest)
        request_cancel_run(tx, namespace, oldest, reason, tx.now_ms())


def admit_new_run(tx: Tx, namespace: str, run_id: str, key: str | None = None) -> bool:
    """A new run of a namespace with a policy (just inserted, counted as open): admits it
    (False) or defers it (True); refuses it by raising ``AdmissionLimitError`` or, for its
    concurrency key under CANCEL_NEWEST, ``ConcurrencyKeyLimitError``."""
    policy = locked_policy(tx, namespace)
    if policy is None:  # removed since the insert's probe (READ COMMITTED)
        return False
    per_key = policy["max_per_key"] if key is not None else None
    if key is not None and per_key is not None and _key_open(tx, namespace, key) - 1 >= per_key:
        if policy["key_strategy"] == "cancel_newest":
            raise ConcurrencyKeyLimitError(
                f"start refused: concurrency key {key!r} of namespace {namespace!r} has its "
                f"limit of {per_key} open runs (strategy CANCEL_NEWEST)"
            )
        if policy["key_strategy"] == "cancel_oldest":
            _cancel_oldest(tx, namespace, key, run_id)
            policy = locked_policy(tx, namespace)  # a close admits: the bucket may differ
            assert policy is not None
    now = tx.now_ms()
    tokens = bucket_tokens(policy, now)
    admitted, waiting = counts(tx, namespace)
    limit = policy["max_open_runs"]
    room = limit is None or admitted - 1 < limit  # the new run is among the admitted
    key_room = key is None or per_key is None or _key_open(tx, namespace, key) - 1 < per_key
    if waiting == 0 and room and tokens >= 1 and key_room:
        save_bucket(tx, policy, tokens - 1, now, 0)
        return False
    if policy["over_limit"] == "refuse" and not (room and tokens >= 1):
        raise AdmissionLimitError(
            f"start refused by namespace {namespace!r} admission: {refusal(policy, admitted - 1)}"
        )
    tx.run(
        "UPDATE runs SET admission = 'deferred' WHERE namespace = ? AND run_id = ?",
        (namespace, run_id),
    )
    save_bucket(tx, policy, tokens, now, waiting + 1)
    if policy["max_per_key"] is None:
        return True  # whatever waits before it waits for room or a token too
    # Earlier waiting runs may wait for their own key only: the run may go past them.
    admit_waiting(tx, namespace)
    return (
        tx.value(
            "SELECT admission FROM runs WHERE namespace = ? AND run_id = ?", (namespace, run_id)
        )
        is not None
    )
