"""Message streams end to end, on a SQLite and a PostgreSQL server with real workers:
client appends deduplicated by id and read in pages, a subscription from a cursor woken
by later appends, a workflow consuming a stream in order across a worker restart (a
cold replay of the pages it read) and appending to a stream the client reads, and the
refusals (a closed run, an oversized batch) with their stable reasons."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from durable_rpc import Client, Worker, workflow
from durable_rpc.client import StreamItem
from durable_rpc.errors import StreamBatchTooLargeError, WorkflowNotRunningError
from durable_rpc.v1 import history_pb2
from tests.e2e.conftest import ServerProcess
from tests.scale import cluster as pg

pytestmark = pytest.mark.timeout(180)


@workflow.defn(name="StreamSummer")
class StreamSummer:
    """Sums ``count`` ints of its "orders" stream, telling "progress" every 10 items,
    and appends the total to "out"."""

    @workflow.run
    async def run(self, count: int) -> int:
        orders = workflow.stream("orders", int)
        total = 0
        for consumed in range(1, count + 1):
            total += await orders.next()
            if consumed % 10 == 0:
                workflow.stream("progress").append([consumed])
        workflow.stream("out").append([total])
        return total


@workflow.defn(name="StreamHolder")
class StreamHolder:
    """Stays open until signalled: a run whose streams clients use."""

    def __init__(self) -> None:
        self.done = False

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.done)

    @workflow.signal
    def finish(self) -> None:
        self.done = True


@pytest.fixture(params=["sqlite", *(["postgres"] if pg.available() else [])])
async def store_client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Client]:
    url = pg.require_cluster().create_database() if request.param == "postgres" else None
    extra = ("--db", url) if url is not None else ()
    server = ServerProcess(tmp_path / "durable.db", tmp_path / "server.log", *extra)
    server.start()
    try:
        async with await Client.connect(server.address) as client:
            yield client
    finally:
        server.stop()
        if url is not None:
            pg.require_cluster().drop_database(url)


def queue() -> str:
    return f"q-{uuid.uuid4().hex[:8]}"


async def test_appends_dedup_and_pages_through_the_client(store_client: Client) -> None:
    client = store_client
    q = queue()
    async with Worker(client, task_queue=q, workflows=[StreamHolder]):
        handle = await client.start_workflow(StreamHolder.run, id="holder", task_queue=q)
        orders = handle.stream("orders", dict)
        first = await orders.append(
            [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}], dedup_ids=["o-1", "o-2", "o-3"]
        )
        assert (first.first_offset, first.appended, first.duplicates) == (0, 3, 0)
        retried = await orders.append([{"sku": "b"}, {"sku": "d"}], dedup_ids=["o-2", "o-4"])
        assert (retried.offsets, retried.appended, retried.duplicates) == ([1, 3], 1, 1)

        page = await orders.read(0, limit=2)
        assert [(i.offset, i.value, i.dedup_id) for i in page.items] == [
            (0, {"sku": "a"}, "o-1"),
            (1, {"sku": "b"}, "o-2"),
        ]
        assert (page.next_offset, page.end) == (2, False)
        rest = await orders.read(page.next_offset)
        assert [i.value["sku"] for i in rest.items] == ["c", "d"]
        assert all(i.append_time is not None for i in rest.items)
        assert (await handle.stream("never").read()).items == []

        described = await orders.describe()
        assert (described.stream, described.length, described.open) == ("orders", 4, True)

        with pytest.raises(StreamBatchTooLargeError) as too_many:
            await orders.append(list(range(101)))
        assert too_many.value.reason == "STREAM_BATCH_TOO_LARGE"

        await handle.signal(StreamHolder.finish)
        await handle.result(timeout=30)
        with pytest.raises(WorkflowNotRunningError) as closed:
            await orders.append([{"sku": "late"}])
        assert closed.value.reason == "WORKFLOW_NOT_RUNNING"
        assert not (await orders.describe()).open
        # A closed run's stream is complete: a subscription reads what is left and ends.
        tail = [i.offset async for i in orders.subscribe(from_offset=2)]
        assert tail == [2, 3]


async def test_a_subscription_from_a_cursor_is_woken_by_later_appends(
    store_client: Client,
) -> None:
    client = store_client
    q = queue()
    async with Worker(client, task_queue=q, workflows=[StreamHolder]):
        handle = await client.start_workflow(StreamHolder.run, id="feed", task_queue=q)
        feed = handle.stream("feed", int)
        await feed.append([0, 1, 2])
        got: list[StreamItem] = []
        first_page = asyncio.Event()

        async def subscriber() -> None:
            # Each long poll may wait 50 s: items arriving sooner came by the append's
            # wake-up, not by a poll ending.
            async for item in feed.subscribe(from_offset=1, poll_wait=50):
                got.append(item)
                if item.offset == 2:
                    first_page.set()
                if item.offset == 5:
                    return

        task = asyncio.create_task(subscriber())
        async with asyncio.timeout(20):
            await first_page.wait()
            await feed.append([3, 4])
            await feed.append([5])
            await task
        assert [(i.offset, i.value) for i in got] == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
        await handle.signal(StreamHolder.finish)


async def test_a_workflow_consumes_a_stream_in_order_across_a_worker_restart(
    store_client: Client,
) -> None:
    client = store_client
    q = queue()
    count = 250  # three pages of at most 100
    handle = await client.start_workflow(StreamSummer.run, count, id="summer", task_queue=q)
    orders = handle.stream("orders", int)
    await orders.append(list(range(100)))
    await orders.append(list(range(100, 150)))
    async with Worker(client, task_queue=q, workflows=[StreamSummer], worker_id="first"):
        # Await the workflow's own word that it consumed all 150 (no sleeping).
        async for item in handle.stream("progress", int).subscribe(poll_wait=20):
            if item.value == 150:
                break
    # The rest arrives while no worker runs; a fresh worker replays the recorded pages.
    await orders.append(list(range(150, 200)))
    await orders.append(list(range(200, count)))
    async with Worker(client, task_queue=q, workflows=[StreamSummer], worker_id="second"):
        assert await handle.result(timeout=60) == sum(range(count))
    out = await handle.stream("out", int).read()
    assert [i.value for i in out.items] == [sum(range(count))]
    # A workflow append's dedup id is made of its command's seq.
    assert out.items[0].dedup_id.startswith("@")
    assert (await handle.stream("out").read(out.next_offset)).end
    progress = await handle.stream("progress", int).read(limit=100)
    assert [i.value for i in progress.items] == list(range(10, count + 1, 10))

    # Bounded pages in history: every page the workflow consumed holds at most 100 items,
    # and together they hold each item once, in order.
    events = [e async for e in _events(handle)]
    read = [i.offset for e in events if e.HasField("stream_read") for i in e.stream_read.items]
    assert read == list(range(count))
    assert max(len(e.stream_read.items) for e in events if e.HasField("stream_read")) <= 100


async def _events(handle: object) -> AsyncIterator[history_pb2.HistoryEvent]:
    for event in await handle.history():  # type: ignore[attr-defined]
        yield event
