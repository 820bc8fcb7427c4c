"""The payload store: payloads over the inline threshold stored once per namespace by
SHA-256 in chunks, verified on upload and on every read, referenced from history (the
reference checked and held for the run in the write's own transaction), and deleted by
retention once no remaining run references them and their grace period has passed."""

from __future__ import annotations

import hashlib
import os

import pytest

from durable_rpc.errors import (
    InvalidArgumentError,
    LeaseLostError,
    NotFoundError,
    PayloadCorruptError,
    PayloadMismatchError,
    PayloadNotFoundError,
)
from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.conftest import Backend
from tests.store.helpers import NS, QUEUE, claim, history, start, wait_db_time

JOB = "retention"
OWNER = "replica-a"
CHUNK = 64 * 1024


def ref_of(data: bytes) -> payload_pb2.Payload:
    return payload_pb2.Payload(
        external=payload_pb2.ExternalPayload(sha256=hashlib.sha256(data).digest(), size=len(data))
    )


async def upload(store: Store, data: bytes, namespace: str = NS) -> payload_pb2.Payload:
    ref = ref_of(data)
    sha, size = ref.external.sha256, ref.external.size
    offset = 0
    while True:
        done = await store.upload_payload_chunk(
            namespace, sha, size, offset, data[offset : offset + CHUNK]
        )
        if done.complete:
            return ref
        offset = done.stored_bytes


async def read(store: Store, ref: payload_pb2.Payload, namespace: str = NS) -> bytes:
    chunks = [
        chunk
        async for chunk in store.read_payload(namespace, ref.external.sha256, ref.external.size)
    ]
    return b"".join(chunks)


async def blob_rows(store: Store) -> tuple[int, int]:
    """(payload_blobs rows, payload_chunks rows)."""

    def op(tx: object) -> tuple[int, int]:
        blobs = tx.value("SELECT COUNT(*) AS n FROM payload_blobs")  # type: ignore[attr-defined]
        chunks = tx.value("SELECT COUNT(*) AS n FROM payload_chunks")  # type: ignore[attr-defined]
        return int(blobs), int(chunks)

    return await store._read(op)  # type: ignore[attr-defined]


async def test_a_payload_round_trips_in_chunks_and_the_same_bytes_are_stored_once(
    store: Store,
) -> None:
    data = os.urandom(5 * CHUNK + 123)
    ref = await upload(store, data)
    assert await read(store, ref) == data
    chunks = (await blob_rows(store))[1]
    assert (await blob_rows(store)) == (1, 6)
    # The same bytes again: the first call answers complete, nothing more is stored.
    again = await store.upload_payload_chunk(
        NS, ref.external.sha256, ref.external.size, 0, data[:CHUNK]
    )
    assert again.complete and again.stored_bytes == len(data)
    assert (await blob_rows(store)) == (1, chunks)


async def test_an_upload_that_does_not_hash_to_its_reference_is_refused_and_discarded(
    store: Store,
) -> None:
    data = os.urandom(2 * CHUNK)
    ref = ref_of(data)
    sha, size = ref.external.sha256, ref.external.size
    await store.upload_payload_chunk(NS, sha, size, 0, data[:CHUNK])
    tampered = bytes([data[CHUNK] ^ 1]) + data[CHUNK + 1 :]
    with pytest.raises(PayloadMismatchError) as caught:
        await store.upload_payload_chunk(NS, sha, size, CHUNK, tampered)
    assert caught.value.reason == "PAYLOAD_MISMATCH"
    assert await blob_rows(store) == (0, 0)
    with pytest.raises(PayloadNotFoundError):
        await read(store, ref)
    # A chunk past the size, a short hash, another size under a stored hash: refused.
    with pytest.raises(PayloadMismatchError):
        await store.upload_payload_chunk(NS, sha, 10, 0, data[:11])
    with pytest.raises(PayloadMismatchError):
        await store.upload_payload_chunk(NS, sha[:31], size, 0, data[:CHUNK])
    await upload(store, data)
    with pytest.raises(PayloadMismatchError):
        await store.upload_payload_chunk(NS, sha, size + 1, 0, b"")
    # A chunk out of order names the bytes stored.
    other = os.urandom(2 * CHUNK)
    oref = ref_of(other)
    await store.upload_payload_chunk(NS, oref.external.sha256, oref.external.size, 0, other[:CHUNK])
    with pytest.raises(InvalidArgumentError, match=f"{CHUNK} bytes"):
        await store.upload_payload_chunk(
            NS, oref.external.sha256, oref.external.size, CHUNK + 1, other[CHUNK + 1 :]
        )


async def test_a_chunk_sent_again_adds_nothing_so_two_uploaders_of_the_same_bytes_finish(
    store: Store,
) -> None:
    data = os.urandom(3 * CHUNK)
    ref = ref_of(data)
    sha, size = ref.external.sha256, ref.external.size
    first = await store.upload_payload_chunk(NS, sha, size, 0, data[:CHUNK])
    # Another uploader of the same bytes starts at 0 too: told where the bytes stand.
    second = await store.upload_payload_chunk(NS, sha, size, 0, data[:CHUNK])
    assert first.stored_bytes == second.stored_bytes == CHUNK
    # A chunk overlapping the stored bytes stores only its tail.
    overlap = await store.upload_payload_chunk(
        NS, sha, size, CHUNK // 2, data[CHUNK // 2 : 2 * CHUNK]
    )
    assert overlap.stored_bytes == 2 * CHUNK
    done = await store.upload_payload_chunk(NS, sha, size, 2 * CHUNK, data[2 * CHUNK :])
    assert done.complete
    assert await read(store, ref) == data


async def test_a_corrupted_chunk_is_detected_on_read(store: Store) -> None:
    data = os.urandom(3 * CHUNK)
    ref = await upload(store, data)

    def corrupt(tx: object) -> None:
        tx.run(  # type: ignore[attr-defined]
            "UPDATE payload_chunks SET data = ? WHERE offset_bytes = ?",
            (b"\x00" * CHUNK, CHUNK),
        )

    await store._write(corrupt)  # type: ignore[attr-defined]
    received: list[bytes] = []
    with pytest.raises(PayloadCorruptError) as caught:
        async for chunk in store.read_payload(NS, ref.external.sha256, ref.external.size):
            received.append(chunk)
    assert caught.value.reason == "PAYLOAD_CORRUPT"
    # The last chunk is held back until the whole payload verified.
    assert sum(map(len, received)) < len(data)


async def test_history_references_only_a_stored_payload(store: Store) -> None:
    data = os.urandom(CHUNK)
    missing = ref_of(data)
    with pytest.raises(PayloadNotFoundError):
        await store.start_workflow(
            NS, "wf-1", "Order", "1", QUEUE, missing.SerializeToString(), "req-1"
        )
    with pytest.raises(NotFoundError):  # the run was never created
        await history(store, "wf-1")
    ref = await upload(store, data)
    await store.start_workflow(NS, "wf-1", "Order", "1", QUEUE, ref.SerializeToString(), "req-1")
    assert ref.SerializeToString() in (await history(store, "wf-1"))[0]
    # A reference with another size than the stored one is not the stored payload.
    wrong = payload_pb2.Payload()
    wrong.CopyFrom(ref)
    wrong.external.size += 1
    with pytest.raises(PayloadNotFoundError):
        await store.signal_workflow(NS, "wf-1", None, "go", wrong.SerializeToString(), "s-1")


async def test_a_decision_referencing_a_payload_is_recorded_with_its_ref(
    store: Store, backend: Backend
) -> None:
    # The PostgreSQL hot path (one function call) writes no refs: such a decision must
    # take the general path, and a missing payload must refuse the whole decision.
    await start(store, "wf-1")
    task = await claim(store)
    data = os.urandom(CHUNK)
    command = workflow_task_pb2.Command(
        seq=1,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(result=ref_of(data)),
    )
    with pytest.raises(PayloadNotFoundError):
        await store.complete_workflow_task(NS, task.lease, len(task.events), [command])
    await upload(store, data)
    await store.complete_workflow_task(NS, task.lease, len(task.events), [command])
    assert (await store.describe(NS, "wf-1", None)).info.status == "completed"

    def refs(tx: object) -> int:
        return int(tx.value("SELECT COUNT(*) AS n FROM payload_refs"))  # type: ignore[attr-defined]

    assert await store._read(refs) == 1  # type: ignore[attr-defined]


async def test_retention_deletes_a_payload_once_no_remaining_run_references_it(
    store: Store,
) -> None:
    await store.update_namespace(NS, None, 300)
    held = await upload(store, os.urandom(CHUNK))
    loose = await upload(store, os.urandom(CHUNK))
    await store.start_workflow(NS, "wf-1", "Order", "1", QUEUE, held.SerializeToString(), "r-1")
    assert await store.take_maintenance_lease(JOB, OWNER, 30_000)
    # Within the grace period nothing goes, referenced or not.
    assert await store.delete_unreferenced_payloads(OWNER, 60_000, 100) == 0
    # Past it, the unreferenced payload goes; the referenced one stays while its run does.
    now = await store.now_ms()
    await wait_db_time(store, now + 2)
    assert await store.delete_unreferenced_payloads(OWNER, 1, 100) == 1
    with pytest.raises(PayloadNotFoundError):
        await read(store, loose)
    assert len(await read(store, held)) == CHUNK
    # The run closes and retention deletes it (its refs with it): the payload follows.
    await store.terminate(NS, "wf-1", None, "done")
    closed = (await store.describe(NS, "wf-1", None)).info.close_time_ms
    assert closed is not None
    await wait_db_time(store, closed + 301)
    assert (await store.delete_expired_runs(OWNER, 100, 1_000)).deleted == 1
    assert await store.delete_unreferenced_payloads(OWNER, 1, 100) == 1
    assert await blob_rows(store) == (0, 0)
    # Only the holder of the retention lease deletes.
    await upload(store, os.urandom(CHUNK))
    with pytest.raises(LeaseLostError):
        await store.delete_unreferenced_payloads("replica-b", 0, 100)


async def test_payloads_are_per_namespace(store: Store) -> None:
    await store.create_namespace("other", "", None)
    data = os.urandom(CHUNK)
    ref = await upload(store, data)
    with pytest.raises(PayloadNotFoundError):
        await read(store, ref, "other")
    with pytest.raises(PayloadNotFoundError):
        await store.start_workflow(
            "other", "wf-1", "Order", "1", QUEUE, ref.SerializeToString(), "r-1"
        )
