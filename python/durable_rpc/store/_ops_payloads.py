"""The payload store's operations: chunked, verified uploads (each uploader's its own
until verified, bounded in size and by the namespace's quota), verified chunked reads,
and retention of payloads no run references and of unfinished uploads (``_payloads``
has the tables and the refs).

Memory stays bounded whatever a payload's size: an upload call stores one chunk, the
verification of a finished upload and a download read a few chunk rows per read
transaction and hash them as they go.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from durable_rpc.errors import (
    InvalidArgumentError,
    PayloadCorruptError,
    PayloadMismatchError,
    PayloadNotFoundError,
    PayloadQuotaExceededError,
    PayloadTooLargeError,
)
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._ops_retention import hold_retention_lease
from durable_rpc.store._payload_records import DEFAULT_PAYLOAD_QUOTA_BYTES, PayloadUpload
from durable_rpc.store._shared import require, require_namespace
from durable_rpc.store._tx import Row, Tx

#: Chunk rows read per read transaction (each at most one upload request's bytes).
CHUNKS_PER_READ = 4

_SHA256_BYTES = 32


def _check_ref(sha256: bytes, size: int) -> None:
    if len(sha256) != _SHA256_BYTES:
        raise PayloadMismatchError(f"sha256 must be {_SHA256_BYTES} bytes, not {len(sha256)}")
    if size <= 0:
        raise PayloadMismatchError("size must be positive")


class _PayloadOps(_SqlOpsBase):
    async def upload_payload_chunk(
        self,
        namespace: str,
        sha256: bytes,
        size: int,
        offset: int,
        data: bytes,
        uploader: str = "",
    ) -> PayloadUpload:
        """Store ``data`` at ``offset`` of ``uploader``'s upload of the payload
        ``(sha256, size)``: the offset at most the bytes stored, only the bytes past them
        kept. The chunk that completes it has the whole frame verified against ``sha256``
        (``PayloadMismatchError`` and the upload discarded when it does not). Each
        uploader's unfinished upload is its own, so none can block another's. A payload
        already stored whole answers complete at once (and its grace period restarts).
        ``PayloadTooLargeError`` past ``max_external_payload_bytes``,
        ``PayloadQuotaExceededError`` past the namespace's payload quota."""
        require(namespace, "namespace")
        _check_ref(sha256, size)
        cap = self._options.max_external_payload_bytes
        if size > cap:
            raise PayloadTooLargeError(
                f"a payload of {size} bytes is over the {cap} bytes this server stores for "
                "one payload (max_external_payload_bytes)"
            )
        if offset < 0:
            raise InvalidArgumentError("offset must not be negative")
        if offset + len(data) > size:
            raise PayloadMismatchError(
                f"a chunk of {len(data)} bytes at offset {offset} runs past the payload's "
                f"{size} bytes"
            )

        def op(tx: Tx) -> PayloadUpload:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            blob = tx.one(
                "SELECT size_bytes FROM payload_blobs "
                f"WHERE namespace = ? AND sha256 = ?{tx.row_lock_suffix}",
                (namespace, sha256),
            )
            if blob is not None:
                if int(blob["size_bytes"]) != size:
                    raise PayloadMismatchError(
                        f"payload {sha256.hex()} is stored with {blob['size_bytes']} bytes, "
                        f"not {size}"
                    )
                # The same bytes again: stored once. The upload still restarts the grace
                # period, so a reference sent next finds it whatever its age.
                tx.run(
                    "UPDATE payload_blobs SET touched_at_ms = ? WHERE namespace = ? AND sha256 = ?",
                    (now, namespace, sha256),
                )
                return PayloadUpload(size, complete=True)
            key = (namespace, sha256, uploader)
            upload = tx.one(
                "SELECT size_bytes, stored_bytes FROM payload_uploads WHERE namespace = ? "
                f"AND sha256 = ? AND uploader = ?{tx.row_lock_suffix}",
                key,
            )
            if upload is not None and int(upload["size_bytes"]) != size:
                # The uploader's own earlier attempt under another size: this one replaces
                # it (the hash decides which, if either, is right).
                _discard_upload(tx, namespace, sha256, uploader)
                upload = None
            stored = 0 if upload is None else int(upload["stored_bytes"])
            if offset > stored:
                raise InvalidArgumentError(
                    f"a chunk at offset {offset}, but {stored} bytes of payload "
                    f"{sha256.hex()} are stored (send offset {stored})"
                )
            # Only the bytes past those stored: a chunk sent again (a retry) adds nothing,
            # so the uploader may go on from the answer's stored_bytes. What was stored is
            # verified once the size is reached. A call that stores nothing changes
            # nothing: it neither starts an upload nor extends one's grace period.
            fresh = data[stored - offset :]
            if not fresh:
                return PayloadUpload(stored, complete=False)
            if upload is None:
                _reserve(tx, namespace, size)
                tx.run(
                    "INSERT INTO payload_uploads (namespace, sha256, uploader, size_bytes, "
                    "stored_bytes, touched_at_ms) VALUES (?, ?, ?, ?, 0, ?)",
                    (*key, size, now),
                )
            tx.run(
                "INSERT INTO payload_chunks (namespace, sha256, uploader, offset_bytes, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (*key, stored, fresh),
            )
            stored += len(fresh)
            tx.run(
                "UPDATE payload_uploads SET stored_bytes = ?, touched_at_ms = ? "
                "WHERE namespace = ? AND sha256 = ? AND uploader = ?",
                (stored, now, *key),
            )
            return PayloadUpload(stored, complete=False)

        upload = await self._write(op)
        if upload.complete or upload.stored_bytes < size:
            return upload
        return await self._finish_upload(namespace, sha256, size, uploader)

    async def _finish_upload(
        self, namespace: str, sha256: bytes, size: int, uploader: str
    ) -> PayloadUpload:
        """Verifies the stored chunks of a fully uploaded payload, then makes them the
        namespace's payload (or discards them: a payload never becomes referenceable
        unverified)."""
        digest = hashlib.sha256()
        total = 0
        async for chunk in self._chunks(namespace, sha256, uploader):
            digest.update(chunk)
            total += len(chunk)
        verified = total == size and digest.digest() == sha256

        def op(tx: Tx) -> None:
            upload = tx.one(
                "SELECT size_bytes, stored_bytes FROM payload_uploads WHERE namespace = ? "
                f"AND sha256 = ? AND uploader = ?{tx.row_lock_suffix}",
                (namespace, sha256, uploader),
            )
            if upload is None or int(upload["stored_bytes"]) != size:
                # Replaced or collected meanwhile: the payload is stored whole by another
                # upload, or this one starts again.
                return
            if not verified:
                _discard_upload(tx, namespace, sha256, uploader)
                return
            tx.run(
                "DELETE FROM payload_uploads WHERE namespace = ? AND sha256 = ? AND uploader = ?",
                (namespace, sha256, uploader),
            )
            became = tx.run(
                "INSERT INTO payload_blobs (namespace, sha256, size_bytes, stored_bytes, "
                "complete, touched_at_ms, uploader) VALUES (?, ?, ?, ?, 1, ?, ?) "
                "ON CONFLICT (namespace, sha256) DO NOTHING",
                (namespace, sha256, size, size, tx.now_ms(), uploader),
            )
            if not became:
                # Another uploader's copy was verified first: this one is not needed.
                _delete_chunks(tx, namespace, sha256, uploader)

        await self._write(op)
        if not verified:
            raise PayloadMismatchError(
                f"the {total} bytes uploaded do not hash to {sha256.hex()}: the upload is discarded"
            )
        return PayloadUpload(size, complete=True)

    async def _chunks(self, namespace: str, sha256: bytes, uploader: str) -> AsyncIterator[bytes]:
        """``uploader``'s stored chunks in order, checked to follow each other without a
        gap."""
        expected = 0
        while True:

            def page(tx: Tx, start: int = expected) -> list[Row]:
                return tx.all(
                    "SELECT offset_bytes, data FROM payload_chunks WHERE namespace = ? "
                    "AND sha256 = ? AND uploader = ? AND offset_bytes >= ? "
                    "ORDER BY offset_bytes LIMIT ?",
                    (namespace, sha256, uploader, start, CHUNKS_PER_READ),
                )

            rows = await self._read_latest(page)
            for row in rows:
                if int(row["offset_bytes"]) != expected:
                    raise PayloadCorruptError(
                        f"payload {sha256.hex()} lacks bytes {expected}..{int(row['offset_bytes'])}"
                    )
                data = bytes(row["data"])
                expected += len(data)
                yield data
            if len(rows) < CHUNKS_PER_READ:
                return

    async def read_payload(self, namespace: str, sha256: bytes, size: int) -> AsyncIterator[bytes]:
        """The stored frame of ``(sha256, size)`` in chunks, a few rows per read, verified
        while read: ``PayloadNotFoundError`` when the namespace does not hold it whole,
        ``PayloadCorruptError`` (before the last chunk) when it does not verify."""
        require(namespace, "namespace")
        _check_ref(sha256, size)

        def info(tx: Tx) -> Row | None:
            return tx.one(
                "SELECT size_bytes, uploader FROM payload_blobs WHERE namespace = ? "
                "AND sha256 = ? AND complete = 1",
                (namespace, sha256),
            )

        row = await self._read(info)
        if row is None or int(row["size_bytes"]) != size:
            raise PayloadNotFoundError(
                f"namespace {namespace!r} holds no payload {sha256.hex()} of {size} bytes"
            )
        digest = hashlib.sha256()
        total = 0
        held: bytes | None = None  # the last chunk goes out only once all verified
        async for chunk in self._chunks(namespace, sha256, str(row["uploader"])):
            if held is not None:
                yield held
            digest.update(chunk)
            total += len(chunk)
            if total > size:
                break
            held = chunk
        if total != size or digest.digest() != sha256:
            raise PayloadCorruptError(
                f"stored payload {sha256.hex()} does not verify: {total} bytes read of "
                f"{size}, or its SHA-256 differs"
            )
        if held is not None:
            yield held

    async def delete_unreferenced_payloads(self, owner: str, grace_ms: int, limit: int) -> int:
        """Delete up to ``limit`` payloads referenced by no remaining run and last uploaded
        more than ``grace_ms`` ago, in one transaction; the count. Fenced like
        :meth:`delete_expired_runs`."""
        if limit <= 0 or grace_ms < 0:
            raise InvalidArgumentError("limit must be positive and grace_ms not negative")

        def op(tx: Tx) -> int:
            now = tx.now_ms()
            hold_retention_lease(tx, owner, now)
            deleted = 0
            for namespace in tx.all("SELECT name FROM namespaces ORDER BY name"):
                name = namespace["name"]
                # Unfinished uploads past their grace period first: nothing refers to one.
                for row in tx.all(
                    "SELECT sha256, uploader FROM payload_uploads WHERE namespace = ? "
                    f"AND touched_at_ms < ? ORDER BY touched_at_ms LIMIT ?{tx.row_lock_suffix}",
                    (name, now - grace_ms, limit - deleted),
                ):
                    _discard_upload(tx, name, bytes(row["sha256"]), str(row["uploader"]))
                    deleted += 1
                if deleted >= limit:
                    break
                # Locked (PostgreSQL) so an upload's refresh or a new ref waits for this
                # commit or makes this transaction see it.
                for row in tx.all(
                    "SELECT sha256, uploader FROM payload_blobs b WHERE namespace = ? "
                    "AND touched_at_ms < ? AND NOT EXISTS (SELECT 1 FROM payload_refs r "
                    "WHERE r.namespace = b.namespace AND r.sha256 = b.sha256) "
                    f"ORDER BY touched_at_ms LIMIT ?{tx.row_lock_suffix}",
                    (name, now - grace_ms, limit - deleted),
                ):
                    sha = bytes(row["sha256"])
                    _delete_chunks(tx, name, sha, str(row["uploader"]))
                    tx.run(
                        "DELETE FROM payload_blobs WHERE namespace = ? AND sha256 = ?",
                        (name, sha),
                    )
                    deleted += 1
                if deleted >= limit:
                    break
            return deleted

        return await self._write(op)


def _delete_chunks(tx: Tx, namespace: str, sha256: bytes, uploader: str) -> None:
    tx.run(
        "DELETE FROM payload_chunks WHERE namespace = ? AND sha256 = ? AND uploader = ?",
        (namespace, sha256, uploader),
    )


def _discard_upload(tx: Tx, namespace: str, sha256: bytes, uploader: str) -> None:
    """Drops ``uploader``'s unfinished upload of ``sha256``: its row and chunks."""
    _delete_chunks(tx, namespace, sha256, uploader)
    tx.run(
        "DELETE FROM payload_uploads WHERE namespace = ? AND sha256 = ? AND uploader = ?",
        (namespace, sha256, uploader),
    )


def payload_usage(tx: Tx, namespace: str) -> tuple[int, int]:
    """The namespace's payload quota and the bytes it holds against it: its payloads
    stored whole and the declared sizes of its unfinished uploads."""
    row = tx.one("SELECT payload_quota_bytes FROM namespaces WHERE name = ?", (namespace,))
    quota = row["payload_quota_bytes"] if row is not None else None
    used = tx.one(
        "SELECT (SELECT COALESCE(SUM(size_bytes), 0) FROM payload_blobs WHERE namespace = ?) "
        "+ (SELECT COALESCE(SUM(size_bytes), 0) FROM payload_uploads WHERE namespace = ?) "
        "AS used",
        (namespace, namespace),
    )
    assert used is not None
    return (DEFAULT_PAYLOAD_QUOTA_BYTES if quota is None else int(quota)), int(used["used"])


def _reserve(tx: Tx, namespace: str, size: int) -> None:
    """Refuses a new upload of ``size`` bytes that would take the namespace past its
    quota. Uploads starting at the same moment on PostgreSQL may each pass: the quota is
    exceeded by at most those."""
    quota, used = payload_usage(tx, namespace)
    if used + size > quota:
        raise PayloadQuotaExceededError(
            f"namespace {namespace!r} holds {used} bytes of payloads; {size} more would "
            f"pass its payload quota of {quota} bytes"
        )
