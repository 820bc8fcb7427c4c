"""Workers and workflow definitions: registration, fingerprints, liveness."""

from __future__ import annotations

import pytest

from durable_rpc.errors import DefinitionChangedError, NamespaceNotFoundError, NotFoundError
from durable_rpc.store import Store, StoreOptions
from tests.store.conftest import Backend
from tests.store.helpers import NS, QUEUE, events, history, start, wait_db_time


async def register(
    store: Store, worker: str, fingerprint: str = "fp-1", *, allow: bool = False
) -> None:
    await store.register_worker(
        NS, worker, QUEUE, [("Order", "1", fingerprint)], ["charge"], "build-1", allow
    )


async def test_run_is_pinned_to_the_registered_fingerprint(store: Store) -> None:
    await start(store, "before")
    await register(store, "w1")
    await start(store, "after")
    assert events(await history(store, "before"))[0].workflow_started.definition_fingerprint == ""
    assert events(await history(store, "after"))[0].workflow_started.definition_fingerprint == (
        "fp-1"
    )


async def test_changed_fingerprint_is_refused_only_while_open_runs_are_pinned(
    store: Store,
) -> None:
    await register(store, "w1", "fp-1")
    await register(store, "w2", "fp-1")  # same code: fine
    await register(store, "w2", "fp-2")  # no run is pinned to fp-1: the new code takes over
    await start(store, "pinned")
    assert events(await history(store, "pinned"))[0].workflow_started.definition_fingerprint == (
        "fp-2"
    )
    with pytest.raises(DefinitionChangedError) as refused:
        await register(store, "w3", "fp-3")
    message = str(refused.value)
    assert "1 open run is pinned" in message
    assert "new version" in message
    assert "workflow.patched" in message
    assert "allow_definition_change=True" in message
    await start(store, "still-old")
    assert events(await history(store, "still-old"))[0].workflow_started.definition_fingerprint == (
        "fp-2"
    )
    with pytest.raises(DefinitionChangedError, match="2 open runs are pinned"):
        await register(store, "w3", "fp-3")
    await register(store, "w3", "fp-3", allow=True)
    await start(store, "new")
    assert events(await history(store, "new"))[0].workflow_started.definition_fingerprint == "fp-3"
    # Once the runs pinned to other code close, nothing can be reinterpreted any more.
    with pytest.raises(DefinitionChangedError, match="3 open runs are pinned"):
        await register(store, "w4", "fp-4")
    for workflow_id in ("pinned", "still-old", "new"):
        await store.terminate(NS, workflow_id, None, "done")
    await register(store, "w4", "fp-4")
    await start(store, "newest")
    assert events(await history(store, "newest"))[0].workflow_started.definition_fingerprint == (
        "fp-4"
    )


async def test_definition_available_follows_live_workers(store: Store) -> None:
    await start(store, "wf-1")
    assert not (await store.describe(NS, "wf-1", None)).definition_available
    await register(store, "w1")
    assert (await store.describe(NS, "wf-1", None)).definition_available
    await store.worker_heartbeat(NS, "w1")
    await store.deregister_worker(NS, "w1")
    assert not (await store.describe(NS, "wf-1", None)).definition_available
    await store.deregister_worker(NS, "w1")  # idempotent
    with pytest.raises(NotFoundError):
        await store.worker_heartbeat(NS, "w1")
    with pytest.raises(NamespaceNotFoundError):
        await store.register_worker("nope", "w", QUEUE, [], [], "", False)


#: The liveness window of the tests that wait one out.
LIVENESS_MS = 1500


async def test_definition_unavailable_when_worker_stops_heartbeating(backend: Backend) -> None:
    # A window far longer than one call takes on a loaded machine (80 ms was not: the
    # describe after a heartbeat came too late once in CI), yet short to wait out.
    store = backend.make(StoreOptions(worker_liveness_ms=LIVENESS_MS))
    async with store:
        await start(store, "wf-1")
        await register(store, "w1")
        assert (await store.describe(NS, "wf-1", None)).definition_available
        await wait_db_time(store, await store.now_ms() + LIVENESS_MS + 20)
        assert not (await store.describe(NS, "wf-1", None)).definition_available
        await store.worker_heartbeat(NS, "w1")
        assert (await store.describe(NS, "wf-1", None)).definition_available
