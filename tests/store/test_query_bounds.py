"""The list query language's bounds (size and comparison count), on every backend: a
query at the bounds is answered, one past them is refused before the database sees it."""

from __future__ import annotations

import pytest

from durable_rpc.errors import InvalidArgumentError, QueryTooComplexError, QueryTooLargeError
from durable_rpc.search_attributes import to_proto
from durable_rpc.store import StartOptions, Store
from durable_rpc.store._search import MAX_ATTRIBUTES, MAX_QUERY_BYTES, MAX_QUERY_TERMS
from tests.store.helpers import NS, QUEUE, payload


async def _start(store: Store, workflow_id: str, attrs: dict[str, object]) -> None:
    await store.start_workflow(
        NS,
        workflow_id,
        "Order",
        "",
        QUEUE,
        payload(b"a"),
        f"r-{workflow_id}",
        options=StartOptions(search_attributes=to_proto(attrs).SerializeToString()),
    )


async def _listed(store: Store, query: str) -> list[str]:
    runs, _ = await store.list_runs(NS, None, None, None, None, 10, None, query)
    return [run.workflow_id for run in runs]


async def test_a_query_at_the_comparison_bound_is_answered(store: Store) -> None:
    assert MAX_QUERY_TERMS <= MAX_ATTRIBUTES  # one run can match every comparison
    await _start(store, "all", {f"A{i}": i for i in range(MAX_QUERY_TERMS)})
    last = MAX_QUERY_TERMS - 1
    await _start(store, "one-off", {f"A{i}": i + (i == last) for i in range(MAX_QUERY_TERMS)})
    # Number comparisons compile to the widest condition (int or double attribute).
    query = " AND ".join(f"A{i} = {i}" for i in range(MAX_QUERY_TERMS))
    assert await _listed(store, query) == ["all"]
    counts = await store.count_runs(NS, None, None, None, None, query)
    assert counts == {"running": 1}
    # Built-in and string comparisons (a time-like string also matches datetimes).
    mixed = " AND ".join(
        ['WorkflowType = "Order"', 'StartTime > "2000-01-01T00:00:00Z"']
        + [f'S{i} != "2026-01-01T00:00:00Z"' for i in range(MAX_QUERY_TERMS - 2)]
    )
    assert await _listed(store, mixed) == []


async def test_a_query_at_the_size_bound_is_answered(store: Store) -> None:
    await _start(store, "wf", {"Note": "n"})
    prefix, suffix = 'WorkflowType = "', '"'
    query = prefix + "x" * (MAX_QUERY_BYTES - len(prefix) - len(suffix)) + suffix
    assert len(query.encode()) == MAX_QUERY_BYTES
    assert await _listed(store, query) == []


async def test_a_query_past_the_bounds_is_refused_with_its_reason(store: Store) -> None:
    too_many = " AND ".join(f"A{i} = {i}" for i in range(MAX_QUERY_TERMS + 1))
    with pytest.raises(QueryTooComplexError, match=f"more than {MAX_QUERY_TERMS} comparisons"):
        await _listed(store, too_many)
    with pytest.raises(QueryTooComplexError):
        await store.count_runs(NS, None, None, None, None, too_many)
    # Counted in UTF-8 bytes: 'é' is two.
    too_long = 'WorkflowType = "' + "é" * (MAX_QUERY_BYTES // 2) + '"'
    with pytest.raises(QueryTooLargeError, match=f"at most {MAX_QUERY_BYTES} bytes"):
        await _listed(store, too_long)
    with pytest.raises(QueryTooLargeError):
        await store.count_runs(NS, None, None, None, None, "A = 1 AND " * 100_000 + "A = 1")


async def test_an_integer_past_64_bits_is_an_invalid_query(store: Store) -> None:
    for digits in ("9" * 30_000, str(2**63), str(-(2**63) - 1)):
        with pytest.raises(InvalidArgumentError, match="outside the 64-bit range"):
            await _listed(store, f"A = {digits}")
    await _start(store, "big", {"A": 2**63 - 1})
    assert await _listed(store, f"A = {2**63 - 1}") == ["big"]
