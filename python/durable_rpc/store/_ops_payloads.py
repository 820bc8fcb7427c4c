"""The payload store's operations: chunked, verified uploads, verified chunked reads, and
retention of payloads no run references (``_payloads`` has the tables and the refs).

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
)
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._ops_retention import hold_retention_lease
from durable_rpc.store._payload_records import PayloadUpload
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
        self, namespace: str, sha256: bytes, size: int, offset: int, data: bytes
    ) -> PayloadUpload:
        require(namespace, "namespace")
        _check_ref(sha256, size)
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
            # The blob's row first (nothing when it exists), then read locked: uploads of
            # the same bytes at once take turns chunk by chunk (PostgreSQL; SQLite has one
            # writer anyway).
            tx.run(
                "INSERT INTO payload_blobs (namespace, sha256, size_bytes, stored_bytes, "
                "complete, touched_at_ms) VALUES (?, ?, ?, 0, 0, ?) "
                "ON CONFLICT (namespace, sha256) DO NOTHING",
                (namespace, sha256, size, now),
            )
            row = tx.one(
                "SELECT size_bytes, stored_bytes, complete FROM payload_blobs "
                f"WHERE namespace = ? AND sha256 = ?{tx.row_lock_suffix}",
                (namespace, sha256),
            )
            assert row is not None
            if int(row["size_bytes"]) != size:
                raise PayloadMismatchError(
                    f"payload {sha256.hex()} is stored with {row['size_bytes']} bytes, not {size}"
                )
            if int(row["complete"]):
                # The same bytes again: stored once. The upload still restarts the grace
                # period, so a reference sent next finds it whatever its age.
                tx.run(
                    "UPDATE payload_blobs SET touched_at_ms = ? WHERE namespace = ? AND sha256 = ?",
                    (now, namespace, sha256),
                )
                return PayloadUpload(size, complete=True)
            stored = int(row["stored_bytes"])
            if offset > stored:
                raise InvalidArgumentError(
                    f"a chunk at offset {offset}, but {stored} bytes of payload "
                    f"{sha256.hex()} are stored (send offset {stored})"
                )
            # Only the bytes past those stored: a chunk sent again (a retry, or another
            # client uploading the same bytes) adds nothing, so either may go on from the
            # answer's stored_bytes. What was stored is verified once the size is reached.
            fresh = data[stored - offset :]
            if fresh:
                tx.run(
                    "INSERT INTO payload_chunks (namespace, sha256, offset_bytes, data) "
                    "VALUES (?, ?, ?, ?)",
                    (namespace, sha256, stored, fresh),
                )
                stored += len(fresh)
            tx.run(
                "UPDATE payload_blobs SET stored_bytes = ?, touched_at_ms = ? "
                "WHERE namespace = ? AND sha256 = ?",
                (stored, now, namespace, sha256),
            )
            return PayloadUpload(stored, complete=False)

        upload = await self._write(op)
        if upload.complete or upload.stored_bytes < size:
            return upload
        return await self._finish_upload(namespace, sha256, size)

    async def _finish_upload(self, namespace: str, sha256: bytes, size: int) -> PayloadUpload:
        """Verifies the stored chunks of a fully uploaded payload, then marks it complete
        (or discards it: a payload never becomes referenceable unverified)."""
        digest = hashlib.sha256()
        total = 0
        async for chunk in self._chunks(namespace, sha256):
            digest.update(chunk)
            total += len(chunk)
        verified = total == size and digest.digest() == sha256

        def op(tx: Tx) -> None:
            if verified:
                tx.run(
                    "UPDATE payload_blobs SET complete = 1 WHERE namespace = ? AND sha256 = ? "
                    "AND stored_bytes = size_bytes",
                    (namespace, sha256),
                )
                return
            _delete_blobs(tx, namespace, [sha256], only_incomplete=True)

        await self._write(op)
        if not verified:
            raise PayloadMismatchError(
                f"the {total} bytes uploaded do not hash to {sha256.hex()}: the upload is discarded"
            )
        return PayloadUpload(size, complete=True)

    async def _chunks(self, namespace: str, sha256: bytes) -> AsyncIterator[bytes]:
        """The stored chunks in order, checked to follow each other without a gap."""
        expected = 0
        while True:

            def page(tx: Tx, start: int = expected) -> list[Row]:
                return tx.all(
                    "SELECT offset_bytes, data FROM payload_chunks WHERE namespace = ? "
                    "AND sha256 = ? AND offset_bytes >= ? ORDER BY offset_bytes LIMIT ?",
                    (namespace, sha256, start, CHUNKS_PER_READ),
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
        require(namespace, "namespace")
        _check_ref(sha256, size)

        def info(tx: Tx) -> Row | None:
            return tx.one(
                "SELECT size_bytes FROM payload_blobs WHERE namespace = ? AND sha256 = ? "
                "AND complete = 1",
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
        async for chunk in self._chunks(namespace, sha256):
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
        if limit <= 0 or grace_ms < 0:
            raise InvalidArgumentError("limit must be positive and grace_ms not negative")

        def op(tx: Tx) -> int:
            now = tx.now_ms()
            hold_retention_lease(tx, owner, now)
            deleted = 0
            for namespace in tx.all("SELECT name FROM namespaces ORDER BY name"):
                name = namespace["name"]
                # Locked (PostgreSQL) so an upload's refresh or a new ref waits for this
                # commit or makes this transaction see it.
                gone = [
                    bytes(row["sha256"])
                    for row in tx.all(
                        "SELECT sha256 FROM payload_blobs b WHERE namespace = ? "
                        "AND touched_at_ms < ? AND NOT EXISTS (SELECT 1 FROM payload_refs r "
                        "WHERE r.namespace = b.namespace AND r.sha256 = b.sha256) "
                        f"ORDER BY touched_at_ms LIMIT ?{tx.row_lock_suffix}",
                        (name, now - grace_ms, limit - deleted),
                    )
                ]
                _delete_blobs(tx, name, gone, only_incomplete=False)
                deleted += len(gone)
                if deleted >= limit:
                    break
            return deleted

        return await self._write(op)


def _delete_blobs(tx: Tx, namespace: str, shas: list[bytes], *, only_incomplete: bool) -> None:
    if not shas:
        return
    marks = ", ".join("?" for _ in shas)
    if only_incomplete:
        shas = [
            bytes(row["sha256"])
            for row in tx.all(
                f"SELECT sha256 FROM payload_blobs WHERE namespace = ? AND sha256 IN ({marks}) "
                "AND complete = 0",
                (namespace, *shas),
            )
        ]
        if not shas:
            return
        marks = ", ".join("?" for _ in shas)
    tx.run(
        f"DELETE FROM payload_chunks WHERE namespace = ? AND sha256 IN ({marks})",
        (namespace, *shas),
    )
    tx.run(
        f"DELETE FROM payload_blobs WHERE namespace = ? AND sha256 IN ({marks})",
        (namespace, *shas),
    )
