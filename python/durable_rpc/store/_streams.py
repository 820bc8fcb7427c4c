"""Message streams of a run (docs/engine.md, "Message streams"): the store side.

A stream is the rows of ``stream_items`` of one (namespace, run, stream name), at
offsets 0, 1, 2, ... without gaps (an append takes the next ones under the run's row
lock, which every append and every decision of the run holds: PostgreSQL FOR UPDATE,
SQLite's one writer). ``dedup_id`` is unique per stream, so a retried append finds its
items and appends nothing. Workflow appends use the ids ``@<command seq>:<index>``; a
client's id may not start with ``@``.

Workflow code reads a stream only through its history: a ReadStream command records
StreamReadRequested, and the page it consumed is a StreamRead input event, appended in
the decision's own transaction when items are there (or when the read does not wait),
else by the transaction of the append that brings the first item (the read waits in
``stream_reads`` meanwhile, and that append wakes the run with a workflow task). A page
is bounded (count and bytes), so a stream of 10,000 items costs a workflow task one
page, never the whole stream.
"""

from __future__ import annotations

from collections.abc import Sequence

from durable_rpc.store._dialects import Dialect
from durable_rpc.store._payloads import record_refs
from durable_rpc.store._shared import append_event, decision_input, ensure_workflow_task
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2, payload_pb2, streams_pb2, workflow_task_pb2

#: A client's page stops before this many payload bytes (it holds at least one item).
PAGE_BYTES = 4 * 1024 * 1024
#: A workflow's page (recorded in its history) stops before this many payload bytes.
WORKFLOW_PAGE_BYTES = 1024 * 1024


def stream_tables(d: Dialect) -> tuple[str, ...]:
    """The message streams migration (same shape on both backends). ``item_offset``:
    OFFSET is a reserved word in SQL."""
    return (
        f"""CREATE TABLE stream_items (
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            stream TEXT NOT NULL,
            item_offset {d.bigint} NOT NULL,
            dedup_id TEXT NOT NULL,
            payload {d.blob} NOT NULL,
            appended_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, run_id, stream, item_offset),
            UNIQUE (namespace, run_id, stream, dedup_id)
        )""",
        # Reads of workflow code waiting for an item (``wait``), until an append ends them.
        f"""CREATE TABLE stream_reads (
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            seq {d.bigint} NOT NULL,
            stream TEXT NOT NULL,
            from_offset {d.bigint} NOT NULL,
            max_items {d.bigint} NOT NULL,
            requested_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, run_id, seq)
        )""",
    )


def stream_length(tx: Tx, namespace: str, run_id: str, stream: str) -> int:
    row = tx.one(
        "SELECT coalesce(max(item_offset) + 1, 0) AS length FROM stream_items "
        "WHERE namespace = ? AND run_id = ? AND stream = ?",
        (namespace, run_id, stream),
    )
    return int(row["length"]) if row is not None else 0


def append_items(
    tx: Tx,
    namespace: str,
    run: Row,
    stream: str,
    items: Sequence[tuple[str, payload_pb2.Payload]],
    now: int,
    deciding: bool = False,
) -> tuple[list[int], int]:
    """Appends (dedup id, payload) items to a stream of the open, locked ``run``: each
    item's offset (a duplicate's existing one) and how many were new. Reads of the
    run waiting on the stream get their page; ``deciding``: in the run's own decision
    (the page is one of its input events, after its command events)."""
    run_id: str = run["run_id"]
    ids = sorted({dedup_id for dedup_id, _ in items})
    marks = ", ".join("?" for _ in ids)
    known = {
        str(row["dedup_id"]): int(row["item_offset"])
        for row in tx.all(
            "SELECT dedup_id, item_offset FROM stream_items WHERE namespace = ? AND run_id = ? "
            f"AND stream = ? AND dedup_id IN ({marks})",
            (namespace, run_id, stream, *ids),
        )
    }
    next_offset = stream_length(tx, namespace, run_id, stream)
    offsets: list[int] = []
    rows: list[tuple[object, ...]] = []
    payloads: list[payload_pb2.Payload] = []
    for dedup_id, payload in items:
        offset = known.get(dedup_id)
        if offset is None:
            offset = known[dedup_id] = next_offset
            next_offset += 1
            rows.append(
                (namespace, run_id, stream, offset, dedup_id, payload.SerializeToString(), now)
            )
            payloads.append(payload)
        offsets.append(offset)
    if rows:
        tx.run(
            "INSERT INTO stream_items (namespace, run_id, stream, item_offset, dedup_id, "
            "payload, appended_at_ms) VALUES " + ", ".join("(?, ?, ?, ?, ?, ?, ?)" for _ in rows),
            [value for row in rows for value in row],
        )
        # Large payloads the items reference belong to the run from now on (retention
        # keeps them while it is kept), as if they were in its history.
        holder = history_pb2.HistoryEvent(
            stream_read=history_pb2.StreamRead(
                items=[streams_pb2.StreamItem(payload=p) for p in payloads]
            )
        )
        record_refs(tx, namespace, run_id, [holder.SerializeToString()])
        answer_waiting_reads(tx, namespace, run, stream, now, deciding)
        tx.notes.streams.append((namespace, run_id))
    return offsets, len(rows)


def read_page(
    tx: Tx, namespace: str, run_id: str, stream: str, offset: int, limit: int, max_bytes: int
) -> tuple[list[streams_pb2.StreamItem], int]:
    """Up to ``limit`` items from ``offset``, stopping before ``max_bytes`` of payloads
    (at least one item), and the offset that continues the page."""
    rows = tx.all(
        "SELECT item_offset, dedup_id, payload, appended_at_ms FROM stream_items "
        "WHERE namespace = ? AND run_id = ? AND stream = ? AND item_offset >= ? "
        "ORDER BY item_offset LIMIT ?",
        (namespace, run_id, stream, offset, limit),
    )
    items: list[streams_pb2.StreamItem] = []
    size = 0
    for row in rows:
        data = bytes(row["payload"])
        if items and size + len(data) > max_bytes:
            break
        size += len(data)
        item = streams_pb2.StreamItem(
            offset=int(row["item_offset"]),
            dedup_id=str(row["dedup_id"]),
            payload=payload_pb2.Payload.FromString(data),
        )
        item.append_time.FromMilliseconds(int(row["appended_at_ms"]))
        items.append(item)
    return items, (items[-1].offset + 1 if items else offset)


def record_read(
    tx: Tx, namespace: str, run: Row, seq: int, read: workflow_task_pb2.ReadStream, now: int
) -> None:
    """A ReadStream command of the decision being recorded (its command event is the
    caller's): the page is an input event of the decision when there are items or the
    read does not wait; else the read waits for the append that brings one."""
    run_id: str = run["run_id"]
    stream, offset = read.stream, read.offset
    items, next_offset = read_page(
        tx, namespace, run_id, stream, offset, read.limit, WORKFLOW_PAGE_BYTES
    )
    if items or not read.wait:
        page = history_pb2.StreamRead(
            seq=seq, stream=stream, offset=offset, items=items, next_offset=next_offset
        )
        decision_input(tx, namespace, run_id, now, "stream_read", page)
        return
    tx.run(
        "INSERT INTO stream_reads (namespace, run_id, seq, stream, from_offset, max_items, "
        "requested_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (namespace, run_id, seq, stream, offset, read.limit, now),
    )


def answer_waiting_reads(
    tx: Tx, namespace: str, run: Row, stream: str, now: int, deciding: bool
) -> None:
    """Records the page of every read of ``run`` waiting on ``stream`` that now has an
    item, and wakes the run (in its own decision, the pages follow its command events)."""
    run_id: str = run["run_id"]
    waiting = tx.all(
        "SELECT seq, from_offset, max_items FROM stream_reads "
        "WHERE namespace = ? AND run_id = ? AND stream = ? ORDER BY seq",
        (namespace, run_id, stream),
    )
    answered = False
    for read in waiting:
        seq, offset = int(read["seq"]), int(read["from_offset"])
        items, next_offset = read_page(
            tx, namespace, run_id, stream, offset, int(read["max_items"]), WORKFLOW_PAGE_BYTES
        )
        if not items:
            continue
        tx.run(
            "DELETE FROM stream_reads WHERE namespace = ? AND run_id = ? AND seq = ?",
            (namespace, run_id, seq),
        )
        page = history_pb2.StreamRead(
            seq=seq, stream=stream, offset=offset, items=items, next_offset=next_offset
        )
        if deciding:
            decision_input(tx, namespace, run_id, now, "stream_read", page)
        else:
            append_event(tx, namespace, run_id, now, "stream_read", page)
            answered = True
    if answered:
        ensure_workflow_task(tx, namespace, run_id, run["task_queue"], now)


def waiting_reason(tx: Tx, namespace: str, run_id: str) -> str:
    """Describe's sentence for a run whose code waits on a stream ('' when none does)."""
    read = tx.one(
        "SELECT stream, from_offset FROM stream_reads WHERE namespace = ? AND run_id = ? "
        "ORDER BY seq LIMIT 1",
        (namespace, run_id),
    )
    if read is None:
        return ""
    return (
        f"Waiting for an item of message stream {read['stream']!r} at offset "
        f"{read['from_offset']} (an append to it wakes the run)."
    )
