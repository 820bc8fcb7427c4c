"""``workflow.upsert_memo()``: the UpsertMemo command merged into the run's memo
(``runs.memo``, a serialized Memo) in the decision's transaction, so describe and list
show it once the completion committed."""

from __future__ import annotations

from durable_rpc import converter
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._search import parse_memo
from durable_rpc.store._shared import append_event
from durable_rpc.store._tx import Tx
from durable_rpc.v1 import history_pb2, search_attributes_pb2

#: The Avro frame of null: an upserted key with this value is removed from the memo.
NULL_FRAME = converter.encode(None)


def upsert_memo(
    tx: Tx, namespace: str, run_id: str, upsert: search_attributes_pb2.Memo, now: int
) -> None:
    """Records MemoUpserted and merges ``upsert`` into the run's memo: each key is added
    or replaced, a key whose value is null is removed (an absent key is no error)."""
    if not upsert.fields:
        raise InvalidArgumentError("upsert_memo has no keys")
    parse_memo(upsert.SerializeToString())  # keys non-empty, values Payload messages
    append_event(tx, namespace, run_id, now, "memo_upserted", history_pb2.MemoUpserted(memo=upsert))
    row = tx.one(
        f"SELECT memo FROM runs WHERE namespace = ? AND run_id = ?{tx.row_lock_suffix}",
        (namespace, run_id),
    )
    memo = search_attributes_pb2.Memo()
    if row is not None and row["memo"]:
        memo.MergeFromString(bytes(row["memo"]))
    for key, value in upsert.fields.items():
        if value.data == NULL_FRAME and not value.HasField("external"):
            memo.fields.pop(key, None)
        else:
            memo.fields[key].CopyFrom(value)
    tx.run(
        "UPDATE runs SET memo = ? WHERE namespace = ? AND run_id = ?",
        (memo.SerializeToString() if memo.fields else None, namespace, run_id),
    )
