"""Reading a run's history in pages bounded in bytes as well as in events.

A page's events are picked from their sizes first (``length(data)``, no data read), then
only those rows are read, so a read holds at most one page in memory however long the
history: a claim's first page, a worker's next pages, GetWorkflowHistory.
"""

from __future__ import annotations

from durable_rpc.store._tx import Tx


def read_page(
    tx: Tx,
    namespace: str,
    run_id: str,
    after_event_id: int,
    through_event_id: int | None,
    max_events: int,
    max_bytes: int,
) -> tuple[list[bytes], bool]:
    """Events after ``after_event_id`` (up to ``through_event_id`` when given), at most
    ``max_events`` of them and ``max_bytes`` in all — but always the first one, so a
    single event larger than a page still comes. Also whether more remain."""
    through = "AND event_id <= ? " if through_event_id is not None else ""
    bound = (through_event_id,) if through_event_id is not None else ()
    sizes = tx.all(
        "SELECT event_id, length(data) AS size FROM history WHERE namespace = ? "
        f"AND run_id = ? AND event_id > ? {through}ORDER BY event_id LIMIT ?",
        (namespace, run_id, after_event_id, *bound, max_events + 1),
    )
    if not sizes:
        return [], False
    last = sizes[0]["event_id"]
    total = int(sizes[0]["size"])
    taken = 1
    for row in sizes[1:max_events]:
        total += int(row["size"])
        if total > max_bytes:
            break
        last = row["event_id"]
        taken += 1
    return read_range(tx, namespace, run_id, after_event_id, last), taken < len(sizes)


def read_range(
    tx: Tx, namespace: str, run_id: str, after_event_id: int, through_event_id: int
) -> list[bytes]:
    """The events after ``after_event_id`` through ``through_event_id``, whatever their
    size: for a range already known to fit a page."""
    rows = tx.all(
        "SELECT data FROM history WHERE namespace = ? AND run_id = ? AND event_id > ? "
        "AND event_id <= ? ORDER BY event_id",
        (namespace, run_id, after_event_id, through_event_id),
    )
    return [bytes(row["data"]) for row in rows]
