"""Fingerprint algorithms on every backend: a stored fingerprint made by an earlier
algorithm is compared with the worker's fingerprint under that algorithm; equal, the
record takes the worker's current fingerprint (and the open runs are repinned to it)
instead of refusing; different, the registration is refused naming every changed
definition, and nothing of it is kept."""

from __future__ import annotations

import pytest

from durable_rpc.errors import DefinitionChangedError, SignalNotDeclaredError
from durable_rpc.store import CodeFingerprints, Store
from tests.store.helpers import NS, QUEUE, payload, start

OLD = "source-text-v1"
NEW = "syntax-tree-v2"


async def register(
    store: Store,
    worker: str,
    fingerprints: dict[str, tuple[str, CodeFingerprints]],
    *,
    signals: list[str] | None = None,
) -> None:
    """Registers ``{type: (fingerprint, claim)}``, each of version 1."""
    await store.register_worker(
        NS,
        worker,
        QUEUE,
        [(name, "1", value) for name, (value, _) in fingerprints.items()],
        [],
        "",
        False,
        declared_signals=None
        if signals is None
        else {(name, "1"): signals for name in fingerprints},
        fingerprints={(name, "1"): claim for name, (_, claim) in fingerprints.items()},
    )


async def stored(store: Store) -> dict[str, str]:
    return {d.name: d.fingerprint for d in await store.list_definitions(NS)}


async def test_an_earlier_algorithms_fingerprint_of_the_same_code_is_replaced(
    store: Store,
) -> None:
    # A worker of the earlier algorithm registers; a run is pinned to its fingerprint.
    await register(store, "w-old", {"Order": ("src-1", CodeFingerprints(OLD))})
    await start(store, "pinned")
    # Today's worker, same code: its fingerprint under the earlier algorithm matches.
    same = CodeFingerprints(NEW, {OLD: "src-1"})
    await register(store, "w-new", {"Order": ("tree-1", same)}, signals=["approve"])
    assert await stored(store) == {"Order": "tree-1"}
    # The open run was repinned to the code's new fingerprint: the set of signals the
    # registration declared applies to it (pinned to "src-1", it would have none).
    with pytest.raises(SignalNotDeclaredError):
        await store.signal_workflow(NS, "pinned", None, "other", payload(b"[1]"), "s-1")
    # A worker that names no algorithm (an SDK from before the field) with today's value
    # is the same code too; the record stays as it is.
    await register(store, "w-unnamed", {"Order": ("tree-1", CodeFingerprints())})
    assert await stored(store) == {"Order": "tree-1"}


async def test_a_different_fingerprint_under_the_stored_algorithm_is_still_refused(
    store: Store,
) -> None:
    old = CodeFingerprints(OLD)
    await register(store, "w-old", {"Order": ("src-1", old), "Refund": ("src-2", old)})
    await start(store, "order", workflow_type="Order")
    await start(store, "refund-1", workflow_type="Refund")
    await start(store, "refund-2", workflow_type="Refund")
    changed = {
        "Order": ("tree-1", CodeFingerprints(NEW, {OLD: "src-1-edited"})),
        "Refund": ("tree-2", CodeFingerprints(NEW, {OLD: "src-2-edited"})),
    }
    with pytest.raises(DefinitionChangedError) as refused:
        await register(store, "w-new", changed)
    message = str(refused.value)
    assert "workflow ('Order', version '1') changed its code, and 1 open run is pinned" in message
    assert "workflow ('Refund', version '1') changed its code, and 2 open runs are pinned" in (
        message
    )
    # One refusal, nothing kept: not even the definitions that were the same code.
    assert await stored(store) == {"Order": "src-1", "Refund": "src-2"}


async def test_a_worker_without_the_stored_algorithm_is_told_so(store: Store) -> None:
    await register(store, "w-old", {"Order": ("src-1", CodeFingerprints(OLD))})
    await start(store, "pinned")
    with pytest.raises(DefinitionChangedError) as refused:
        await register(store, "w-new", {"Order": ("tree-1", CodeFingerprints(NEW))})
    message = str(refused.value)
    assert "made by the 'source-text-v1' algorithm, which this worker does not report" in message
    assert "changed its code" not in message
    assert await stored(store) == {"Order": "src-1"}
