"""Lease bookkeeping in the Rust core: LeaseBook (worker) and DueIndex (server)."""

from __future__ import annotations

import pytest

from durable_rpc._core import DueIndex, LeaseBook


def test_heartbeat_fraction_is_validated() -> None:
    assert LeaseBook().heartbeat_fraction == 0.5
    assert LeaseBook(0.25).heartbeat_fraction == 0.25
    for bad in (0.0, -1.0, 0.6, 1.0, float("nan")):
        with pytest.raises(ValueError, match=r"\(0, 0.5\]"):
            LeaseBook(bad)


def test_heartbeat_due_at_half_the_lease_until_renewed() -> None:
    book = LeaseBook()
    assert len(book) == 0
    assert book.next_deadline() is None
    assert book.track("t1", 1, 10_000, 1_000)
    assert len(book) == 1
    assert book.next_deadline() == 6_000
    assert book.due_for_heartbeat(5_999) == []
    assert book.due_for_heartbeat(6_000) == [("t1", 1)]
    assert book.due_for_heartbeat(6_500) == [("t1", 1)]  # asking does not reset
    assert book.renewed("t1", 1, 10_000, 6_500)
    assert book.due_for_heartbeat(6_500) == []
    assert book.next_deadline() == 11_500


def test_expired_leases_are_reported() -> None:
    book = LeaseBook()
    book.track("a", 1, 1_000, 0)
    book.track("b", 2, 5_000, 0)
    assert book.expired(999) == []
    assert book.expired(1_000) == [("a", 1)]
    # An expired lease is not heartbeated.
    assert book.due_for_heartbeat(3_000) == [("b", 2)]
    assert book.release("a")
    assert not book.release("a")
    assert book.expired(1_000) == []


def test_stale_renewal_does_not_revive_a_newer_lease() -> None:
    book = LeaseBook()
    book.track("t1", 1, 10_000, 0)
    assert book.track("t1", 2, 10_000, 20_000)  # re-claimed with a higher token
    assert not book.renewed("t1", 1, 10_000, 25_000)
    assert book.token("t1") == 2
    assert book.next_deadline() == 25_000
    assert not book.track("t1", 1, 10_000, 26_000)
    assert not book.renewed("unknown", 1, 10_000, 0)


def test_due_index_pops_in_due_order() -> None:
    idx = DueIndex()
    assert len(idx) == 0
    assert idx.next_due() is None
    idx.schedule("timer:b", 300)
    idx.schedule("timer:a", 100)
    idx.schedule("retry:x", 200)
    assert len(idx) == 3
    assert "timer:a" in idx
    assert idx.next_due() == 100
    assert idx.pop_due(99) == []
    assert idx.pop_due(200) == ["timer:a", "retry:x"]
    assert "timer:a" not in idx
    assert idx.next_due() == 300
    assert idx.pop_due(10**12) == ["timer:b"]
    assert len(idx) == 0


def test_due_index_reschedule_and_cancel() -> None:
    idx = DueIndex()
    idx.schedule("lease:1", 100)
    idx.schedule("lease:1", 500)
    assert len(idx) == 1
    assert idx.due_time("lease:1") == 500
    assert idx.pop_due(100) == []
    idx.schedule("x", 50)
    assert idx.cancel("x")
    assert not idx.cancel("x")
    assert idx.due_time("x") is None
    for key in ("c", "a", "b"):
        idx.schedule(key, 7)
    assert idx.pop_due(7) == ["a", "b", "c"]
    assert idx.pop_due(500) == ["lease:1"]
