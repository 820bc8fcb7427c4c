"""The payload store's tables, and the references a transaction's history appends make.

A payload over the SDK's inline threshold is uploaded in chunks (``payload_chunks``, one
row per uploaded chunk, so neither side ever holds a whole payload in one row or one
statement). An upload in progress is its uploader's own (``payload_uploads``, keyed by
namespace, SHA-256 and uploader, its chunks under the same uploader), so no caller can
block another's upload of the same bytes; once verified, it becomes the namespace's
``payload_blobs`` row (keyed by namespace and SHA-256), whose ``uploader`` names the
chunks holding its bytes. A history event that references it adds a ``payload_refs``
row for its run in the same transaction (:func:`record_refs`), after checking the
namespace holds the payload whole with that size; retention deletes a run's refs with
the run, then each payload no ref holds, and each unfinished upload, once its grace
period (from its last upload) has passed.
"""

from __future__ import annotations

from durable_rpc import _payload_refs
from durable_rpc.errors import PayloadNotFoundError
from durable_rpc.store._dialects import Dialect
from durable_rpc.store._statements import RawStatements


def payload_tables(d: Dialect) -> tuple[str, ...]:
    """The payload store's tables (same shape on both backends)."""
    return (
        f"""CREATE TABLE payload_blobs (
            namespace TEXT NOT NULL,
            sha256 {d.blob} NOT NULL,
            size_bytes {d.bigint} NOT NULL,
            stored_bytes {d.bigint} NOT NULL,
            complete {d.bigint} NOT NULL,
            touched_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, sha256)
        )""",
        f"""CREATE TABLE payload_chunks (
            namespace TEXT NOT NULL,
            sha256 {d.blob} NOT NULL,
            offset_bytes {d.bigint} NOT NULL,
            data {d.blob} NOT NULL,
            PRIMARY KEY (namespace, sha256, offset_bytes)
        )""",
        f"""CREATE TABLE payload_refs (
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            sha256 {d.blob} NOT NULL,
            PRIMARY KEY (namespace, run_id, sha256),
            FOREIGN KEY (namespace, sha256) REFERENCES payload_blobs (namespace, sha256)
        )""",
        # Whether any run still refers to a payload (retention, and the foreign key).
        "CREATE INDEX payload_refs_by_blob ON payload_refs (namespace, sha256)",
        # Retention's candidates: the payloads last uploaded longest ago.
        "CREATE INDEX payload_blobs_touched ON payload_blobs (namespace, touched_at_ms)",
    )


def upload_scoping_migration(d: Dialect) -> tuple[str, ...]:
    """Unfinished uploads per uploader, the payloads' owner of chunks, and the
    namespaces' payload quotas. Payloads stored whole keep their chunks (uploader "");
    an upload left unfinished is dropped (its client uploads it again)."""
    return (
        f"""CREATE TABLE payload_chunks_by_uploader (
            namespace TEXT NOT NULL,
            sha256 {d.blob} NOT NULL,
            uploader TEXT NOT NULL,
            offset_bytes {d.bigint} NOT NULL,
            data {d.blob} NOT NULL,
            PRIMARY KEY (namespace, sha256, uploader, offset_bytes)
        )""",
        "INSERT INTO payload_chunks_by_uploader "
        "(namespace, sha256, uploader, offset_bytes, data) "
        "SELECT c.namespace, c.sha256, '', c.offset_bytes, c.data FROM payload_chunks c "
        "JOIN payload_blobs b ON b.namespace = c.namespace AND b.sha256 = c.sha256 "
        "WHERE b.complete = 1",
        "DROP TABLE payload_chunks",
        "ALTER TABLE payload_chunks_by_uploader RENAME TO payload_chunks",
        "DELETE FROM payload_blobs WHERE complete = 0",
        "ALTER TABLE payload_blobs ADD COLUMN uploader TEXT NOT NULL DEFAULT ''",
        f"""CREATE TABLE payload_uploads (
            namespace TEXT NOT NULL,
            sha256 {d.blob} NOT NULL,
            uploader TEXT NOT NULL,
            size_bytes {d.bigint} NOT NULL,
            stored_bytes {d.bigint} NOT NULL,
            touched_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, sha256, uploader)
        )""",
        # Retention's candidates: the uploads left unfinished longest.
        "CREATE INDEX payload_uploads_touched ON payload_uploads (namespace, touched_at_ms)",
        f"ALTER TABLE namespaces ADD COLUMN payload_quota_bytes {d.bigint}",
    )


def record_refs(tx: RawStatements, namespace: str, run_id: str, events: list[bytes]) -> None:
    """Adds the run's refs to the payloads ``events`` reference, after checking each is
    stored whole with the size the reference names (``PayloadNotFoundError`` otherwise:
    the whole transaction is refused, no history points at a missing payload).

    The blob rows are read with the write lock (PostgreSQL: FOR UPDATE), so retention
    deleting one concurrently either commits first (it is then not found here) or waits
    for this commit (and then sees the ref)."""
    refs: set[tuple[bytes, int]] = set()
    for data in events:
        refs |= _payload_refs.event_refs(data)
    if not refs:
        return
    shas = sorted({sha for sha, _ in refs})
    marks = ", ".join("?" for _ in shas)
    rows = tx._fetch(
        "SELECT sha256, size_bytes FROM payload_blobs WHERE namespace = ? AND complete = 1 "
        f"AND sha256 IN ({marks}) ORDER BY sha256{tx.row_lock_suffix}",
        (namespace, *shas),
    )
    stored = {bytes(row["sha256"]): int(row["size_bytes"]) for row in rows}
    for sha, size in sorted(refs):
        if stored.get(sha) != size:
            raise PayloadNotFoundError(
                f"namespace {namespace!r} holds no payload {sha.hex()} of {size} bytes "
                "(upload it before referencing it)"
            )
    tx._execute(
        "INSERT INTO payload_refs (namespace, run_id, sha256) VALUES "
        + ", ".join("(?, ?, ?)" for _ in shas)
        + " ON CONFLICT DO NOTHING",
        [value for sha in shas for value in (namespace, run_id, sha)],
    )
