"""Queries in flight, kept in the store so any replica can relay them (on every backend)."""

from __future__ import annotations

import pytest

from durable_rpc.errors import NamespaceNotFoundError, ResourceExhaustedError
from durable_rpc.store import Store, _ops_queries
from tests.store.helpers import NS, QUEUE, RecordingListener, wait_db_time

COUNTER = ("Counter", "1")


async def submit(
    store: Store,
    query_id: str,
    definition: tuple[str, str] = COUNTER,
    timeout_ms: int = 60_000,
) -> None:
    await store.submit_query(
        NS, QUEUE, query_id, definition, f"task of {query_id}".encode(), timeout_ms
    )


async def test_a_query_is_taken_once_answered_once_and_read_by_its_caller(
    store: Store, listener: RecordingListener
) -> None:
    await submit(store, "q-1")
    await listener.wait_for(lambda: (NS, QUEUE, "query") in listener.tasks, "the query's note")
    assert await store.query_answer(NS, "q-1") is None

    assert await store.take_query(NS, QUEUE, [COUNTER]) == b"task of q-1"
    assert await store.take_query(NS, QUEUE, [COUNTER]) is None, "taken queries stay taken"

    assert await store.answer_query(NS, "q-1", b"answer 1")
    await listener.wait_for(lambda: (NS, "q-1") in listener.answered, "the answer's note")
    assert not await store.answer_query(NS, "q-1", b"answer 2"), "the first answer stands"
    assert await store.query_answer(NS, "q-1") == b"answer 1"

    await store.forget_query(NS, "q-1")
    assert await store.query_answer(NS, "q-1") is None
    assert not await store.answer_query(NS, "q-1", b"late"), "nobody waits any more"
    assert listener.answered == [(NS, "q-1")]


async def test_a_poller_takes_the_oldest_query_it_can_replay(store: Store) -> None:
    await submit(store, "q-old", ("Other", "1"))
    await submit(store, "q-v2", ("Counter", "2"))
    await submit(store, "q-new", COUNTER)
    await submit(store, "q-newest", COUNTER)

    assert await store.take_query(NS, QUEUE, [COUNTER]) == b"task of q-new"
    assert await store.take_query(NS, "another-queue", []) is None
    # A poller that names no definitions takes any, oldest first.
    assert await store.take_query(NS, QUEUE, []) == b"task of q-old"
    assert await store.take_query(NS, QUEUE, [("Counter", "2"), COUNTER]) == b"task of q-v2"
    assert await store.take_query(NS, QUEUE, [("Counter", "")]) == b"task of q-newest", (
        "an empty version is version 1"
    )
    assert await store.take_query(NS, QUEUE, []) is None


async def test_an_expired_query_is_neither_taken_nor_answered_and_is_deleted(
    store: Store,
) -> None:
    await submit(store, "q-short", timeout_ms=200)
    await submit(store, "q-taken", timeout_ms=200)
    assert await store.take_query(NS, QUEUE, [COUNTER]) == b"task of q-short"
    await wait_db_time(store, await store.now_ms() + 250)

    assert await store.take_query(NS, QUEUE, [COUNTER]) is None
    assert not await store.answer_query(NS, "q-short", b"too late")
    # The next submit deletes rows whose caller never came back for them.
    await submit(store, "q-next")
    assert await store.take_query(NS, QUEUE, [COUNTER]) == b"task of q-next"
    assert await store.answer_query(NS, "q-next", b"fine")
    assert await store.query_answer(NS, "q-next") == b"fine"


async def test_too_many_waiting_queries_are_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_ops_queries, "MAX_QUEUED_QUERIES", 2)
    await submit(store, "q-1")
    await submit(store, "q-2")
    with pytest.raises(ResourceExhaustedError, match="2 queries already wait"):
        await submit(store, "q-3")
    # Taken queries no longer wait: room for another.
    assert await store.take_query(NS, QUEUE, []) is not None
    await submit(store, "q-3")


async def test_queries_of_an_unknown_namespace_are_refused(store: Store) -> None:
    with pytest.raises(NamespaceNotFoundError):
        await store.submit_query("nowhere", QUEUE, "q-1", COUNTER, b"task", 1000)
    with pytest.raises(NamespaceNotFoundError):
        await store.take_query("nowhere", QUEUE, [])
