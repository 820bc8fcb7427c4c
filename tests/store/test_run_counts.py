"""Counts of runs by status (``count_runs``): the filter of ``list_runs``, its query
language included, counted in one grouped statement (every backend)."""

from __future__ import annotations

import pytest

from durable_rpc.errors import InvalidArgumentError, NamespaceNotFoundError
from durable_rpc.search_attributes import to_proto
from durable_rpc.store import StartOptions, Store
from tests.store.helpers import NS, QUEUE, payload


async def _start(store: Store, i: int) -> None:
    await store.start_workflow(
        NS,
        f"wf-{i}",
        "Order" if i % 3 else "Refund",
        "",
        QUEUE,
        payload(b"a"),
        f"r-{i}",
        options=StartOptions(
            search_attributes=to_proto({"CustomerId": f"c-{i % 2}"}).SerializeToString()
        ),
    )


async def test_counts_by_status_follow_the_list_filter(store: Store) -> None:
    for i in range(12):
        await _start(store, i)
    for i in (0, 1, 2, 3):  # two c-0 and two c-1 runs end terminated
        await store.terminate(NS, f"wf-{i}", None, "test")

    counts = await store.count_runs(NS, None, None, None, None, 'CustomerId = "c-0"')
    # c-0 is every even i: 0..10 (6 runs), of which 0 and 2 are terminated.
    assert counts == {"running": 4, "terminated": 2}
    listed = await store.list_runs(NS, None, None, None, None, 100, None, 'CustomerId = "c-0"')
    assert sum(counts.values()) == len(listed[0])

    assert await store.count_runs(NS, None, None, None, None, None) == {
        "running": 8,
        "terminated": 4,
    }
    # The list's own fields and the query AND-ed, as list_runs does: running c-1 runs
    # are i = 5, 7, 9, 11, of which 9 is a Refund.
    assert await store.count_runs(NS, "running", "Order", None, None, 'CustomerId = "c-1"') == {
        "running": 3
    }
    assert await store.count_runs(NS, None, None, None, None, 'Status = "completed"') == {}


async def test_a_bad_count_query_is_refused_as_the_list_refuses_it(store: Store) -> None:
    for bad in ["Amount >", "Amount = 1 OR x = 2", 'Status = "nope"']:
        with pytest.raises(InvalidArgumentError, match="invalid query") as counted:
            await store.count_runs(NS, None, None, None, None, bad)
        with pytest.raises(InvalidArgumentError) as listed:
            await store.list_runs(NS, None, None, None, None, 1, None, bad)
        assert str(counted.value) == str(listed.value)
    with pytest.raises(InvalidArgumentError, match="unknown status"):
        await store.count_runs(NS, "asleep", None, None, None, None)
    with pytest.raises(NamespaceNotFoundError):
        await store.count_runs("no-such-namespace", None, None, None, None, None)
