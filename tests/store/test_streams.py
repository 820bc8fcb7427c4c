"""Message streams in the store: appends deduplicated by id at stable offsets, bounded
pages, a closed run's streams refusing items, and workflow code's reads and appends
recorded in its history (a waiting read answered by the append that brings an item),
on every backend."""

from __future__ import annotations

import pytest

from durable_rpc.errors import (
    InvalidArgumentError,
    StreamBatchTooLargeError,
    WorkflowNotRunningError,
)
from durable_rpc.store import ClaimedWorkflowTask, Store
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2
from tests.store.conftest import Backend
from tests.store.helpers import (
    NS,
    RecordingListener,
    claim,
    events,
    history,
    kinds,
    start,
    wait_db_time,
)
from tests.store.schema_rows import rows_of
from tests.store.test_retention import SHORT_MS, sweep


def items(*ids: str) -> list[tuple[str, payload_pb2.Payload]]:
    return [(i, payload_pb2.Payload(data=i.encode())) for i in ids]


def read(seq: int, offset: int, limit: int = 100, wait: bool = True) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        read_stream=workflow_task_pb2.ReadStream(
            stream="orders", offset=offset, limit=limit, wait=wait
        ),
    )


def append(seq: int, *data: bytes, stream: str = "out") -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        append_to_stream=workflow_task_pb2.AppendToStream(
            stream=stream, items=[payload_pb2.Payload(data=d) for d in data]
        ),
    )


async def decide(
    store: Store, task: ClaimedWorkflowTask, commands: list[workflow_task_pb2.Command]
) -> None:
    await store.complete_workflow_task(NS, task.lease, len(task.events), commands)


def pages(raw: list[bytes]) -> list[history_pb2.StreamRead]:
    return [e.stream_read for e in events(raw) if e.HasField("stream_read")]


async def test_appends_are_deduplicated_at_stable_offsets_and_read_in_pages(
    store: Store,
) -> None:
    run_id = await start(store, "wf")
    first = await store.append_stream(NS, "wf", None, "orders", items("a", "b", "c"))
    assert (first.run_id, first.offsets, first.appended, first.duplicates) == (
        run_id,
        [0, 1, 2],
        3,
        0,
    )
    # A retry (b, c) with one new item: only d is appended; a repeat inside the request
    # is a duplicate of its first occurrence.
    again = await store.append_stream(NS, "wf", run_id, "orders", items("b", "c", "d", "d"))
    assert (again.offsets, again.appended, again.duplicates) == ([1, 2, 3, 3], 1, 3)

    page = await store.read_stream(NS, "wf", None, "orders", 0, 2)
    assert [(i.offset, i.dedup_id, i.payload.data) for i in page.items] == [
        (0, "a", b"a"),
        (1, "b", b"b"),
    ]
    assert page.next_offset == 2 and page.open
    rest = await store.read_stream(NS, "wf", None, "orders", page.next_offset, 0)
    assert [i.offset for i in rest.items] == [2, 3] and rest.next_offset == 4
    assert all(i.append_time.ToMilliseconds() > 0 for i in rest.items)
    past = await store.read_stream(NS, "wf", None, "orders", 4, 10)
    assert (past.items, past.next_offset) == ([], 4)
    # A stream nothing was appended to is an empty stream.
    unknown = await store.read_stream(NS, "wf", None, "nothing-here", 0, 10)
    assert (unknown.items, unknown.next_offset) == ([], 0)

    described = await store.describe_stream(NS, "wf", None, "orders")
    assert (described.length, described.open) == (4, True)
    assert described.last_append_ms is not None
    empty = await store.describe_stream(NS, "wf", None, "nothing-here")
    assert (empty.length, empty.open, empty.last_append_ms) == (0, True, None)


async def test_a_closed_run_refuses_items_and_bad_appends_are_refused(store: Store) -> None:
    await start(store, "wf")
    with pytest.raises(StreamBatchTooLargeError) as too_many:
        await store.append_stream(NS, "wf", None, "orders", items(*(f"i{n}" for n in range(101))))
    assert too_many.value.reason == "STREAM_BATCH_TOO_LARGE"
    for bad in ("", "@1:0", "x" * 201):
        with pytest.raises(InvalidArgumentError):
            await store.append_stream(NS, "wf", None, "orders", items(bad))
    with pytest.raises(InvalidArgumentError):
        await store.append_stream(NS, "wf", None, "", items("a"))
    with pytest.raises(InvalidArgumentError):
        await store.read_stream(NS, "wf", None, "orders", -1, 10)
    with pytest.raises(InvalidArgumentError):
        await store.read_stream(NS, "wf", None, "orders", 0, 101)

    await store.append_stream(NS, "wf", None, "orders", items("a"))
    await store.terminate(NS, "wf", None, "done")
    with pytest.raises(WorkflowNotRunningError) as closed:
        await store.append_stream(NS, "wf", None, "orders", items("b"))
    assert closed.value.reason == "WORKFLOW_NOT_RUNNING"
    page = await store.read_stream(NS, "wf", None, "orders", 0, 10)
    assert [i.dedup_id for i in page.items] == ["a"] and not page.open
    assert not (await store.describe_stream(NS, "wf", None, "orders")).open


async def test_a_read_with_items_there_is_recorded_in_its_decision(store: Store) -> None:
    run_id = await start(store, "wf")
    await store.append_stream(NS, "wf", None, "orders", items("a", "b", "c"))
    task = await claim(store)
    await decide(store, task, [read(1, 0, limit=2)])
    raw = await history(store, "wf")
    assert kinds(raw)[-3:] == ["workflow_task_completed", "stream_read_requested", "stream_read"]
    (page,) = pages(raw)
    assert (page.seq, page.offset, page.next_offset) == (1, 0, 2)
    assert [i.payload.data for i in page.items] == [b"a", b"b"]
    # The page is new input: the run has a workflow task to consume it.
    nxt = await claim(store)
    assert nxt.run_id == run_id
    # A read past the end that does not wait records an empty page at once.
    await decide(store, nxt, [read(2, 3, wait=False)])
    last = pages(await history(store, "wf"))[-1]
    assert (last.seq, list(last.items), last.next_offset) == (2, [], 3)
    assert (await claim(store)).run_id == run_id


async def test_a_waiting_read_is_answered_by_the_append_that_brings_an_item(
    store: Store, listener: RecordingListener
) -> None:
    run_id = await start(store, "wf")
    task = await claim(store)
    await decide(store, task, [read(1, 0)])
    assert kinds(await history(store, "wf"))[-1] == "stream_read_requested"
    assert await store.claim_workflow_task(NS, task.task_queue, "w1", 30_000) is None
    stuck = (await store.describe(NS, "wf", None)).stuck_reason
    assert stuck == (
        "Waiting for an item of message stream 'orders' at offset 0 (an append to it wakes "
        "the run)."
    )
    # Another stream's item does not end the wait.
    await store.append_stream(NS, "wf", None, "other", items("x"))
    assert pages(await history(store, "wf")) == []

    await store.append_stream(NS, "wf", None, "orders", items("a", "b"))
    (page,) = pages(await history(store, "wf"))
    assert (page.seq, [i.dedup_id for i in page.items], page.next_offset) == (1, ["a", "b"], 2)
    assert (NS, run_id) in listener.streams
    woken = await claim(store)
    assert woken.run_id == run_id
    # Answered once: a later append records nothing more.
    await store.append_stream(NS, "wf", None, "orders", items("c"))
    assert len(pages(await history(store, "wf"))) == 1


async def test_workflow_appends_are_recorded_and_deduplicated_by_their_seq(
    store: Store,
) -> None:
    await start(store, "wf")
    task = await claim(store)
    # The run waits on its own stream, then appends to it in a later command of the
    # same decision: the page follows the decision's command events.
    await decide(store, task, [read(1, 0), append(2, b"x", b"y", stream="orders")])
    raw = await history(store, "wf")
    assert kinds(raw)[-4:] == [
        "workflow_task_completed",
        "stream_read_requested",
        "stream_appended",
        "stream_read",
    ]
    appended = events(raw)[-2].stream_appended
    assert (appended.seq, appended.stream, appended.first_offset, appended.count) == (
        2,
        "orders",
        0,
        2,
    )
    page = await store.read_stream(NS, "wf", None, "orders", 0, 10)
    assert [(i.dedup_id, i.payload.data) for i in page.items] == [("@2:0", b"x"), ("@2:1", b"y")]
    with pytest.raises(StreamBatchTooLargeError):
        nxt = await claim(store)
        await decide(store, nxt, [append(3, *([b"z"] * 101))])


async def test_retention_deletes_a_runs_streams_with_it(store: Store, backend: Backend) -> None:
    await store.update_namespace(NS, None, SHORT_MS)
    old = await start(store, "old")
    await store.append_stream(NS, "old", None, "orders", items("a"))
    task = await claim(store)
    await decide(store, task, [read(1, 5)])  # waits: a stream_reads row
    await store.terminate(NS, "old", None, "done")
    before = await rows_of(store, backend.name == "postgres", [old])
    assert {"stream_items", "stream_reads"} <= set(before)
    closed_at = (await store.describe(NS, "old", old)).info.close_time_ms
    assert closed_at is not None
    await wait_db_time(store, closed_at + SHORT_MS + 1)
    assert await sweep(store) == 1
    assert await rows_of(store, backend.name == "postgres", [old]) == {}


async def test_another_replica_hears_of_an_append(store: Store, backend: Backend) -> None:
    """What wakes a ReadStream long poll served by another PostgreSQL replica: the
    append's NOTIFY (one store per replica on the same database)."""
    if backend.name != "postgres":
        pytest.skip("replicas share a PostgreSQL database")
    other = backend.make()
    heard = RecordingListener()
    other.set_listener(heard)
    await other.open()
    try:
        run_id = await start(store, "wf")
        await store.append_stream(NS, "wf", None, "orders", items("a"))
        await heard.wait_for(lambda: (NS, run_id) in heard.streams, "the append's NOTIFY")
    finally:
        await other.close()
