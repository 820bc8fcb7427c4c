"""Payload codecs end to end: a real server process (SQLite file and PostgreSQL), real
workers over a socket. With an AesGcmCodec every payload the client and the worker send
is encrypted before it leaves them (inputs, results, signals, queries, updates, children,
memo, continue-as-new, large payloads), so the database holds no plaintext; keys rotate;
a worker without the key fails the workflow task with the codec's reason until one with
the key takes it; compression shrinks what is stored; without a codec the frames are the
plain Avro of the interop golden cases (docs/engine.md, "Payload codecs")."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from durable_rpc import Client, RetryPolicy, Worker, activity, converter, payload, workflow
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.codec import (
    ENCODING,
    ENCODING_ENCRYPTED,
    ENCODING_ZLIB,
    KEY_ID,
    AesGcmCodec,
    CompositeCodec,
    CompressionCodec,
)
from durable_rpc.errors import InvalidPayloadError, PayloadKeyUnknownError, QueryFailedError
from durable_rpc.testing import Replayer
from durable_rpc.v1 import history_pb2, payload_pb2, service_pb2, service_pb2_grpc
from tests.e2e.conftest import ROOT, ServerProcess, eventually
from tests.scale import cluster as pg

pytestmark = pytest.mark.timeout(180)

K1 = bytes(range(32))
K2 = bytes(range(32, 64))
WRONG = bytes(range(64, 96))
SECRET = "launch-code-7f3a9c"


def aes(**keys: bytes) -> AesGcmCodec:
    return AesGcmCodec(keys=keys, encrypt_with=next(reversed(keys)))


@activity.defn
async def seal(text: str) -> str:
    return f"sealed:{text}"


@workflow.defn(name="CodecChild")
class CodecChild:
    @workflow.run
    async def run(self, text: str) -> str:
        return f"child:{text}"


@workflow.defn(name="Vault")
class Vault:
    """Every kind of payload a run carries: its input, memo, an activity's input and
    result, a child's input and result, signals, a query and an update, its result."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.done = False

    @workflow.run
    async def run(self, secret: str) -> dict[str, Any]:
        workflow.upsert_memo({"note": f"memo:{secret}"})
        sealed = await workflow.execute_activity(
            seal, secret, start_to_close_timeout=timedelta(seconds=10)
        )
        child = await workflow.execute_child_workflow(
            CodecChild.run, secret, id=f"{workflow.info().workflow_id}-child"
        )
        await workflow.wait_condition(lambda: self.done)
        return {"sealed": sealed, "child": child, "notes": self.notes}

    @workflow.signal
    def add(self, note: str) -> None:
        self.notes.append(note)

    @workflow.signal
    def finish(self) -> None:
        self.done = True

    @workflow.query
    def notes_so_far(self, prefix: str) -> list[str]:
        return [prefix + n for n in self.notes]

    @workflow.update
    def stamp(self, note: str) -> str:
        self.notes.append(note)
        return f"stamped:{note}"


@workflow.defn(name="Relay")
class Relay:
    @workflow.run
    async def run(self, secret: str, hops: int) -> str:
        if hops > 0:
            workflow.continue_as_new(f"{secret}+", hops - 1)
        return f"relayed:{secret}"


_released = asyncio.Event()


@activity.defn
async def beating(text: str) -> str:
    # Heartbeats until the test saw its details on the server, then finishes.
    while not _released.is_set():
        activity.heartbeat(f"beat:{text}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_released.wait(), 0.1)
    return "done"


@workflow.defn(name="Beats")
class Beats:
    @workflow.run
    async def run(self, secret: str) -> str:
        return await workflow.execute_activity(
            beating,
            secret,
            start_to_close_timeout=timedelta(seconds=60),
            heartbeat_timeout=timedelta(seconds=1),
        )


@workflow.defn(name="OneSeal")
class OneSeal:
    @workflow.run
    async def run(self, secret: str) -> str:
        return await workflow.execute_activity(
            seal,
            secret,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        )


@workflow.defn(name="Echo")
class Echo:
    @workflow.run
    async def run(self, *values: Any) -> list[Any]:
        return list(values)


@dataclass
class Served:
    server: ServerProcess
    pg_url: str | None

    @property
    def address(self) -> str:
        return self.server.address

    def stored_bytes(self) -> bytes:
        """Everything the database holds, as bytes a plaintext would show up in."""
        if self.pg_url is None:
            # The SQLite file and its write-ahead log, as they are on disk.
            files = [self.server.db_path, Path(f"{self.server.db_path}-wal")]
            return b"".join(f.read_bytes() for f in files if f.exists())
        import psycopg

        out = []
        with psycopg.connect(self.pg_url) as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
            for (table,) in tables:
                for (row,) in conn.execute(f'SELECT t::text FROM "{table}" t'):
                    out.append(row)
        text = "\n".join(out)
        # bytea columns print as \x<hex>: the plaintext's hex is looked for too.
        return text.encode() + bytes.fromhex("".join(_hex_runs(text)))


def _hex_runs(text: str) -> list[str]:
    return [run[:-1] if len(run) % 2 else run for run in re.findall(r"\\\\?x([0-9a-f]+)", text)]


@pytest.fixture(params=["sqlite", *(["postgres"] if pg.available() else [])])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Served]:
    url = pg.require_cluster().create_database() if request.param == "postgres" else None
    extra = ("--db", url) if url is not None else ()
    server = ServerProcess(tmp_path / "durable.db", tmp_path / "server.log", *extra)
    server.start()
    try:
        yield Served(server, url)
    finally:
        server.stop()
        if url is not None:
            pg.require_cluster().drop_database(url)


def queue() -> str:
    return f"codec-{uuid.uuid4().hex[:8]}"


async def raw_history(address: str, workflow_id: str) -> list[history_pb2.HistoryEvent]:
    """The history as any gRPC client reads it: generated stubs on a plain channel."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_pb2_grpc.WorkflowServiceStub(channel)
        response = await stub.GetWorkflowHistory(
            service_pb2.GetWorkflowHistoryRequest(workflow_id=workflow_id, page_size=1000)
        )
    return list(response.history.events)


def all_payloads(events: list[history_pb2.HistoryEvent]) -> list[payload_pb2.Payload]:
    from durable_rpc import _payload_refs

    return [p for e in events for p in _payload_refs.payloads(e)]


async def test_an_encrypted_run_leaves_no_plaintext_in_the_database(served: Served) -> None:
    codec = aes(k1=K1)
    q = queue()
    async with (
        await Client.connect(served.address, payload_codec=codec) as client,
        Worker(client, task_queue=q, workflows=[Vault, CodecChild, Relay], activities=[seal]),
    ):
        handle = await client.start_workflow(
            Vault.run, SECRET, id="vault", task_queue=q, memo={"owner": f"owner:{SECRET}"}
        )
        await handle.signal(Vault.add, f"signal:{SECRET}")
        assert await handle.execute_update(Vault.stamp, f"update:{SECRET}") == (
            f"stamped:update:{SECRET}"
        )
        assert await handle.query(Vault.notes_so_far, "q:") == [
            f"q:signal:{SECRET}",
            f"q:update:{SECRET}",
        ]
        await handle.signal(Vault.finish)
        assert await handle.result(timeout=60) == {
            "sealed": f"sealed:{SECRET}",
            "child": f"child:{SECRET}",
            "notes": [f"signal:{SECRET}", f"update:{SECRET}"],
        }
        memo = (await handle.describe()).info.memo
        assert memo == {"owner": f"owner:{SECRET}", "note": f"memo:{SECRET}"}
        relay = await client.start_workflow(Relay.run, SECRET, 2, id="relay", task_queue=q)
        assert await relay.result(timeout=60) == f"relayed:{SECRET}++"

    # What the server keeps and sends is ciphertext: every payload of the history (but
    # the null frames, which carry nothing) names its encoding and key.
    events = await raw_history(served.address, "vault")
    kinds = {e.WhichOneof("attributes") for e in events}
    assert {"workflow_started", "activity_completed", "signal_received"} <= kinds
    stored = all_payloads(events)
    encrypted = [p for p in stored if p.metadata]
    assert len(encrypted) >= 8
    for p in encrypted:
        assert p.metadata[ENCODING] == ENCODING_ENCRYPTED and p.metadata[KEY_ID] == "k1"
    assert all(p.data == converter.encode(None) for p in stored if not p.metadata)
    # Exported as stored, the history replays offline with the workers' codec.
    exported = history_pb2.History(events=events)
    assert Replayer([Vault], payload_codec=codec).replay(exported).ok
    keyless = Replayer([Vault], payload_codec=aes(k9=WRONG), raise_on_failure=False)
    assert isinstance(keyless.replay(exported).error, PayloadKeyUnknownError)
    # Nor does any row of any table: history, runs (memo, result), tasks, children.
    dump = served.stored_bytes()
    # The dump does read the rows (names stay plain; the events' bytes are there).
    assert b"CodecChild" in dump and ENCODING_ENCRYPTED.encode() in dump
    assert b"sealed:" not in dump
    assert SECRET.encode() not in dump
    assert b"launch-code" not in dump


async def test_keys_rotate_old_payloads_still_decode(served: Served) -> None:
    q = queue()
    async with (
        await Client.connect(served.address, payload_codec=aes(k1=K1)) as old,
        Worker(old, task_queue=q, workflows=[Vault, CodecChild], activities=[seal]),
    ):
        handle = await old.start_workflow(Vault.run, SECRET, id="rotating", task_queue=q)
        await handle.signal(Vault.add, "before")
        assert await handle.query(Vault.notes_so_far, "") == ["before"]
    # Rotated: k2 seals new payloads, k1 still opens the old ones (the history replayed
    # by the new worker, the run's input among them).
    async with (
        await Client.connect(served.address, payload_codec=aes(k1=K1, k2=K2)) as new,
        Worker(new, task_queue=q, workflows=[Vault, CodecChild], activities=[seal]),
    ):
        rotated = new.get_handle("rotating")
        await rotated.signal(Vault.add, "after")
        await rotated.signal(Vault.finish)
        result = await rotated.result(timeout=60)
        assert result["notes"] == ["before", "after"]
        assert result["sealed"] == f"sealed:{SECRET}"
    key_ids = [
        p.metadata[KEY_ID]
        for p in all_payloads(await raw_history(served.address, "rotating"))
        if p.metadata
    ]
    assert key_ids[0] == "k1" and key_ids[-1] == "k2"


async def test_a_worker_without_the_key_fails_the_task_until_one_with_it_runs(
    served: Served,
) -> None:
    q = queue()
    async with await Client.connect(served.address, payload_codec=aes(k1=K1)) as client:
        handle = await client.start_workflow(Vault.run, SECRET, id="locked", task_queue=q)

        async def task_failed(failure_type: str) -> None:
            async def seen() -> bool:
                described = await handle.describe()
                # The task fails, never the run: nothing read its ciphertext as a frame.
                assert described.info.status == "running", described.info.status
                f = described.last_workflow_task_failure
                return f is not None and f.type == failure_type

            await eventually(seen, what=f"a workflow task failed with {failure_type}")

        # A worker with no codec at all: the task fails; the run does not (its ciphertext
        # is never read as a frame).
        async with (
            await Client.connect(served.address) as plain,
            Worker(plain, task_queue=q, workflows=[Vault, CodecChild], activities=[seal]),
        ):
            await task_failed("PayloadCodecMissingError")
        # A worker holding only another key id: its workflow task fails, reason named.
        async with (
            await Client.connect(served.address, payload_codec=aes(k9=WRONG)) as keyless,
            Worker(keyless, task_queue=q, workflows=[Vault, CodecChild], activities=[seal]),
        ):
            await task_failed("PayloadKeyUnknownError")
        described = await handle.describe()
        assert described.info.status == "running"
        failure = described.last_workflow_task_failure
        assert failure is not None
        assert failure.type == "PayloadKeyUnknownError"
        assert failure.message.startswith("PAYLOAD_KEY_UNKNOWN: ")
        assert "'k1'" in failure.message
        # The same key id with the wrong key: the payload does not authenticate.
        async with (
            await Client.connect(served.address, payload_codec=aes(k1=WRONG)) as wrong,
            Worker(wrong, task_queue=q, workflows=[Vault, CodecChild], activities=[seal]),
        ):
            await task_failed("PayloadDecryptFailedError")
        assert (await handle.describe()).workflow_task_attempt >= 3
        # History was not touched by the failures: only the start and the task events.
        events = await raw_history(served.address, "locked")
        assert {e.WhichOneof("attributes") for e in events} <= {
            "workflow_started",
            "workflow_task_failed",
        }
        # Restarted with the right key, the worker runs the task that was retried.
        async with Worker(client, task_queue=q, workflows=[Vault, CodecChild], activities=[seal]):
            await handle.signal(Vault.finish)
            result = await handle.result(timeout=60)
        assert result["sealed"] == f"sealed:{SECRET}"


async def test_an_activity_or_query_the_worker_cannot_decode_fails_with_the_reason(
    served: Served,
) -> None:
    q = queue()
    async with (
        await Client.connect(served.address, payload_codec=aes(k1=K1)) as client,
        await Client.connect(served.address, payload_codec=aes(k9=WRONG)) as keyless,
    ):
        # Workflow tasks on a worker with the key, activity attempts on one without it.
        async with (
            Worker(client, task_queue=q, workflows=[OneSeal], worker_id="keyed"),
            Worker(keyless, task_queue=q, activities=[seal], worker_id="keyless"),
        ):
            handle = await client.start_workflow(OneSeal.run, SECRET, id="one", task_queue=q)

            async def attempt_failed() -> bool:
                pending = (await handle.describe()).pending_activities
                return bool(pending) and pending[0].last_failure.type == "PayloadKeyUnknownError"

            await eventually(attempt_failed, what="an activity attempt failed on the codec")
            assert "PAYLOAD_KEY_UNKNOWN" in (
                (await handle.describe()).pending_activities[0].last_failure.message
            )
        # Once a worker with the key runs it, the next attempt completes.
        async with Worker(client, task_queue=q, workflows=[OneSeal], activities=[seal]):
            assert await handle.result(timeout=60) == f"sealed:{SECRET}"
        # A query answered by a worker without the key fails, reason named.
        async with Worker(keyless, task_queue=q, workflows=[OneSeal]):
            with pytest.raises(QueryFailedError) as caught:
                await handle.query("anything", timeout=30)
        assert "PAYLOAD_KEY_UNKNOWN" in caught.value.message


async def test_compression_shrinks_a_large_repetitive_input(served: Served) -> None:
    text = "the same line again and again\n" * 20_000  # 600 KB
    codec = CompositeCodec([CompressionCodec(min_bytes=1024), aes(k1=K1)])
    q = queue()
    async with (
        await Client.connect(served.address, payload_codec=codec) as client,
        Worker(client, task_queue=q, workflows=[Echo]),
    ):
        handle = await client.start_workflow(Echo.run, text, id="squeezed", task_queue=q)
        assert await handle.result(timeout=60) == [text]
    started = (await raw_history(served.address, "squeezed"))[0].workflow_started.input
    # Compressed, then encrypted: small enough to stay inline (no upload).
    assert not started.HasField("external")
    assert started.metadata[ENCODING] == ENCODING_ENCRYPTED
    assert len(started.data) < len(text) // 50
    # Compression alone: the stored payload says so and inflates back to the frame.
    async with (
        await Client.connect(served.address, payload_codec=CompressionCodec()) as zipped,
        Worker(zipped, task_queue=q, workflows=[Echo]),
    ):
        handle = await zipped.start_workflow(Echo.run, text, id="zipped", task_queue=q)
        assert await handle.result(timeout=60) == [text]
    stored = (await raw_history(served.address, "zipped"))[0].workflow_started.input
    assert stored.metadata[ENCODING] == ENCODING_ZLIB
    assert len(stored.data) < len(text) // 50
    # A small payload is not worth it: sent as it was.
    assert CompressionCodec().encode([payload_pb2.Payload(data=b"tiny")])[0].data == b"tiny"


async def test_a_large_encrypted_payload_is_uploaded_as_ciphertext(served: Served) -> None:
    data = os.urandom(3 * 2**20)  # over the inline threshold even once encrypted
    q = queue()
    async with (
        await Client.connect(served.address, payload_codec=aes(k1=K1)) as client,
        Worker(client, task_queue=q, workflows=[Echo]),
    ):
        handle = await client.start_workflow(Echo.run, data, SECRET, id="big-secret", task_queue=q)
        assert await handle.result(timeout=60) == [data, SECRET]
    started = (await raw_history(served.address, "big-secret"))[0].workflow_started.input
    # The reference keeps the codec's metadata beside it: a reader knows what to undo.
    assert started.HasField("external") and not started.data
    assert started.metadata[ENCODING] == ENCODING_ENCRYPTED
    assert data[:4096] not in served.stored_bytes()


async def test_without_a_codec_payloads_are_the_golden_avro_frames(
    served: Served, interop_dir: Path
) -> None:
    golden = json.loads((interop_dir / "golden-avro-value-v1.json").read_text())
    array = next(c for c in golden["cases"] if c["name"] == "array")
    wire = base64.b64decode(array["wire_base64"])
    values = payload.decode(wire)
    q = queue()
    async with (
        await Client.connect(served.address) as client,
        Worker(client, task_queue=q, workflows=[Echo]),
    ):
        handle = await client.start_workflow(Echo.run, *values, id="golden", task_queue=q)
        assert await handle.result(timeout=60) == values
    # A non-Python client reading the history sees the golden bytes and no metadata.
    events = await raw_history(served.address, "golden")
    started = events[0].workflow_started.input
    assert started.data == wire and not started.metadata
    completed = next(e for e in events if e.WhichOneof("attributes") == "workflow_completed")
    assert completed.workflow_completed.result.data == payload.encode(list(values))
    assert all(not p.metadata for p in all_payloads(events))
    # And one that starts a run itself, with a golden frame, gets it back as it sent it.
    async with grpc.aio.insecure_channel(served.address) as channel:
        stub = service_pb2_grpc.WorkflowServiceStub(channel)
        await stub.StartWorkflow(
            service_pb2.StartWorkflowRequest(
                workflow_id="from-go",
                workflow_type="Echo",
                task_queue=queue(),
                input=payload_pb2.Payload(data=wire),
                request_id=uuid.uuid4().hex,
            )
        )
    assert (await raw_history(served.address, "from-go"))[0].workflow_started.input.data == wire


async def test_the_server_stores_an_encoded_payload_and_checks_its_metadata(
    served: Served,
) -> None:
    async with grpc.aio.insecure_channel(served.address) as channel:
        stub = service_pb2_grpc.WorkflowServiceStub(channel)
        opaque = payload_pb2.Payload(data=b"\x00not avro", metadata={ENCODING: "x/custom"})
        await stub.StartWorkflow(
            service_pb2.StartWorkflowRequest(
                workflow_id="opaque",
                workflow_type="Echo",
                task_queue=queue(),
                input=opaque,
                request_id=uuid.uuid4().hex,
            )
        )
        # Metadata that names no encoding is no codec's output: the frame must be valid.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.StartWorkflow(
                service_pb2.StartWorkflowRequest(
                    workflow_id="nameless",
                    workflow_type="Echo",
                    task_queue=queue(),
                    input=payload_pb2.Payload(data=b"\x00not avro", metadata={"k": "v"}),
                    request_id=uuid.uuid4().hex,
                )
            )
    error = from_rpc_error(refused.value)
    assert isinstance(error, InvalidPayloadError)
    assert "metadata without an 'encoding' key" in error.message
    assert (await raw_history(served.address, "opaque"))[0].workflow_started.input == opaque


async def _echo_sealed_with_k1(served: Served, workflow_id: str) -> None:
    """A finished Echo of SECRET whose payloads are encrypted with key k1."""
    q = queue()
    async with (
        await Client.connect(served.address, payload_codec=aes(k1=K1)) as client,
        Worker(client, task_queue=q, workflows=[Echo]),
    ):
        handle = await client.start_workflow(Echo.run, SECRET, id=workflow_id, task_queue=q)
        await handle.result(timeout=60)


async def test_the_cli_shows_encrypted_payloads_without_the_key(served: Served) -> None:
    await _echo_sealed_with_k1(served, "shown")

    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "durable_rpc.cli", "workflow", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "DURABLE_RPC_ADDRESS": served.address, "COLUMNS": "400"},
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "<encrypted: key k1>" in cli("result", "shown")
    history = json.loads(cli("history", "shown", "--json"))
    assert history["events"][0]["workflowStarted"]["input"] == "<encrypted: key k1>"
    assert "<encrypted: key k1>" in cli("history", "shown")


async def test_the_cli_decrypts_with_the_operators_key_file(served: Served, tmp_path: Path) -> None:
    await _echo_sealed_with_k1(served, "decrypted")

    def cli(keys: object, *args: str) -> subprocess.CompletedProcess[str]:
        keys_file = tmp_path / "keys.json"
        keys_file.write_text(keys if isinstance(keys, str) else json.dumps(keys))
        env = {
            **os.environ,
            "DURABLE_RPC_ADDRESS": served.address,
            "DURABLE_RPC_CODEC_KEYS_FILE": str(keys_file),
            "COLUMNS": "400",
        }
        return subprocess.run(
            [sys.executable, "-m", "durable_rpc.cli", "workflow", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=60,
        )

    def b64(key: bytes) -> str:
        return base64.b64encode(key).decode()

    result = cli({"k1": b64(K1)}, "result", "decrypted")
    assert result.returncode == 0, result.stderr
    assert SECRET in result.stdout
    history = cli({"k1": b64(K1)}, "history", "decrypted", "--json")
    assert json.loads(history.stdout)["events"][0]["workflowStarted"]["input"] == [SECRET]
    # Another key under the payload's key id does not authenticate it; another key id
    # is not the payload's: it stays encrypted.
    wrong = cli({"k1": b64(K2)}, "history", "decrypted", "--json")
    assert json.loads(wrong.stdout)["events"][0]["workflowStarted"]["input"] == (
        "<undecryptable: key k1>"
    )
    other = cli({"k2": b64(K2)}, "result", "decrypted")
    assert other.returncode == 0 and "<encrypted: key k1>" in other.stdout
    # A key file that cannot be used stops the command, naming the file, not a key.
    for keys, says in (
        ("{not json", "is not JSON"),
        ({"k1": "***"}, "the key of 'k1' is not base64"),
        ({"k1": b64(K1[:16])}, "key 'k1' must be 32 bytes"),
        ({}, "expected a non-empty object"),
    ):
        refused = cli(keys, "result", "decrypted")
        assert refused.returncode == 1, refused.stdout
        assert "DURABLE_RPC_CODEC_KEYS_FILE" in refused.stderr and says in refused.stderr
        assert b64(K1) not in refused.stderr and SECRET not in refused.stdout


async def test_heartbeat_details_travel_encrypted(served: Served) -> None:
    _released.clear()
    q = queue()
    async with (
        await Client.connect(served.address, payload_codec=aes(k1=K1)) as client,
        Worker(client, task_queue=q, workflows=[Beats], activities=[beating]),
    ):
        handle = await client.start_workflow(Beats.run, SECRET, id="beats", task_queue=q)

        async def beat_seen() -> bool:
            pending = (await handle.describe()).pending_activities
            return bool(pending) and pending[0].HasField("heartbeat_details")

        await eventually(beat_seen, what="the activity's heartbeat details on the server")
        # Decoded for the client that holds the key, encrypted as the server keeps them.
        details = (await handle.describe()).pending_activities[0].heartbeat_details
        assert payload.decode(details.data) == [f"beat:{SECRET}"]
        async with grpc.aio.insecure_channel(served.address) as channel:
            raw = await service_pb2_grpc.WorkflowServiceStub(channel).DescribeWorkflow(
                service_pb2.DescribeWorkflowRequest(workflow_id="beats")
            )
        stored = raw.pending_activities[0].heartbeat_details
        assert stored.metadata[ENCODING] == ENCODING_ENCRYPTED
        assert SECRET.encode() not in served.stored_bytes()
        _released.set()
        assert await handle.result(timeout=60) == "done"
