"""Per-run history limits (events and bytes) and byte-bounded history pages.

Small limits so a few events reach them: past the hard limit new input is refused with
HISTORY_LIMIT_EXCEEDED and nothing is recorded; a decision that passes it fails the run
with that reason instead of being applied; history pages never exceed the page size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from durable_rpc.errors import HistoryLimitExceededError
from durable_rpc.store import HistoryLimits, Store, StoreOptions
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.conftest import Backend
from tests.store.helpers import (
    NS,
    QUEUE,
    claim,
    complete,
    events,
    kinds,
    payload,
    schedule,
    start,
)

LIMITS = HistoryLimits(
    max_events=12, max_bytes=6_000, warn_events=6, warn_bytes=3_000, page_bytes=1_000
)


@pytest.fixture
async def limited(backend: Backend) -> AsyncIterator[Store]:
    store = backend.make(StoreOptions(history=LIMITS))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def _all_pages(store: Store) -> list[bytes]:
    out: list[bytes] = []
    while True:
        page = await store.get_history(NS, "wf-1", None, len(out), 10_000)
        out.extend(page.events)
        if not page.has_more:
            return out


async def _signal(store: Store, size: int, request_id: str = "") -> bool:
    return await store.signal_workflow(NS, "wf-1", None, "sig", payload(b"x" * size), request_id)


async def test_the_run_row_counts_its_history_in_events_and_bytes(limited: Store) -> None:
    await start(limited)
    await _signal(limited, 100)
    raw = await _all_pages(limited)
    info = (await limited.describe(NS, "wf-1", None)).info
    assert info.history_length == len(raw) == 2
    assert info.history_size_bytes == sum(len(e) for e in raw)


async def test_a_signal_past_the_byte_limit_is_refused_and_nothing_recorded(
    limited: Store,
) -> None:
    await start(limited)
    await _signal(limited, 2_500, "r1")
    await _signal(limited, 2_500, "r2")
    before = await _all_pages(limited)
    with pytest.raises(HistoryLimitExceededError) as refused:
        await _signal(limited, 2_500, "r3")
    assert refused.value.reason == "HISTORY_LIMIT_EXCEEDED"
    assert await _all_pages(limited) == before
    # The request id was not remembered either: the same request is refused again.
    with pytest.raises(HistoryLimitExceededError):
        await _signal(limited, 2_500, "r3")


async def test_a_signal_past_the_event_limit_is_refused(limited: Store) -> None:
    await start(limited)
    for _ in range(LIMITS.max_events - 1):
        await _signal(limited, 1)
    with pytest.raises(HistoryLimitExceededError):
        await _signal(limited, 1)
    assert len(await _all_pages(limited)) == LIMITS.max_events


async def test_a_start_whose_input_passes_the_limit_is_refused(limited: Store) -> None:
    with pytest.raises(HistoryLimitExceededError):
        await limited.start_workflow(
            NS, "big", "Order", "1", QUEUE, payload(b"x" * 7_000), "req-big"
        )
    with pytest.raises(HistoryLimitExceededError):
        await limited.signal_with_start(
            NS, "big", "Order", "1", QUEUE, payload(b"a"), "sig", payload(b"x" * 7_000), "r"
        )
    runs, _ = await limited.list_runs(NS, None, None, None, None, 10, None)
    assert runs == []


async def test_signal_with_start_and_updates_are_refused_on_a_full_run(limited: Store) -> None:
    run_id = await start(limited)
    await _signal(limited, 2_900)
    await _signal(limited, 2_900)
    with pytest.raises(HistoryLimitExceededError):
        await limited.signal_with_start(
            NS, "wf-1", "Order", "1", QUEUE, payload(b"a"), "sig", payload(b"x" * 500), "r"
        )
    with pytest.raises(HistoryLimitExceededError):
        await limited.request_update(NS, run_id, "u1", "set", payload(b"x" * 500))
    with pytest.raises(HistoryLimitExceededError):
        await limited.update_with_start(
            NS, "wf-1", "Order", "1", QUEUE, payload(b"a"), "u2", "set", payload(b"x" * 500)
        )
    assert (await limited.describe(NS, "wf-1", None)).info.history_length == 3
    task = await claim(limited)
    assert task.pending_updates == ()


async def test_a_decision_that_passes_the_limit_fails_the_run_unapplied(limited: Store) -> None:
    await start(limited)
    await _signal(limited, 2_800)
    task = await claim(limited)
    # Its activity input takes the history past 6,000 bytes.
    big = schedule(1, data=b"y" * 3_500)
    completion = await limited.complete_workflow_task_tracked(
        NS, task.lease, task.history_length, [big]
    )
    assert completion.eager_activities == []
    outcome = await limited.get_outcome(NS, "wf-1", None)
    assert outcome.status == "failed"
    assert outcome.failure is not None
    failure = payload_pb2.Failure.FromString(outcome.failure)
    assert failure.type == "HISTORY_LIMIT_EXCEEDED"
    assert "limit" in failure.message
    # The decision's command was not applied: no ActivityScheduled, no activity task.
    assert kinds(await _all_pages(limited)) == [
        "workflow_started",
        "signal_received",
        "workflow_task_completed",
        "workflow_failed",
    ]
    assert await limited.claim_activity_task(NS, QUEUE, "w1", ["act"]) is None


async def test_a_closing_decision_is_recorded_past_the_limit(limited: Store) -> None:
    await start(limited)
    await _signal(limited, 2_800)
    task = await claim(limited)
    closing = workflow_task_pb2.Command(
        seq=1,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(
            result=payload_pb2.Payload(data=b"z" * 4_000)
        ),
    )
    await limited.complete_workflow_task(NS, task.lease, task.history_length, [closing])
    assert (await limited.get_outcome(NS, "wf-1", None)).status == "completed"


async def test_describe_warns_from_the_warn_mark(limited: Store) -> None:
    await start(limited)
    assert (await limited.describe(NS, "wf-1", None)).history_warning == ""
    await _signal(limited, 3_000)
    warning = (await limited.describe(NS, "wf-1", None)).history_warning
    assert "warn mark" in warning and "continue-as-new" in warning


async def test_history_pages_are_bounded_in_bytes(limited: Store) -> None:
    await start(limited)
    for _ in range(8):
        await _signal(limited, 300)
    whole = await limited.get_history(NS, "wf-1", None, 0, 10_000)
    assert len(events(whole.events)) < 9 and whole.has_more
    pages: list[bytes] = []
    after = 0
    while True:
        page = await limited.get_history(NS, "wf-1", None, after, 10_000)
        assert page.events, "a page always holds at least one event"
        assert len(page.events) == 1 or sum(len(e) for e in page.events) <= LIMITS.page_bytes
        pages.extend(page.events)
        after += len(page.events)
        if not page.has_more:
            break
    assert [e.event_id for e in events(pages)] == list(range(1, 10))


async def test_a_single_event_larger_than_a_page_comes_alone(limited: Store) -> None:
    await start(limited)
    await _signal(limited, 1_500)
    await _signal(limited, 10)
    first = await limited.get_history(NS, "wf-1", None, 1, 10_000)
    assert len(first.events) == 1 and len(first.events[0]) > LIMITS.page_bytes
    assert first.has_more


async def test_a_claim_carries_the_first_page_and_the_run_totals(limited: Store) -> None:
    await start(limited)
    for _ in range(8):
        await _signal(limited, 300)
    task = await claim(limited)
    assert task.history_length == 9
    whole = await _all_pages(limited)
    assert task.history_size_bytes == sum(len(e) for e in whole)
    assert 0 < len(task.events) < 9
    assert sum(len(e) for e in task.events) <= LIMITS.page_bytes
    assert task.events == whole[: len(task.events)]
    # The rest, through the claim's length (a later append is not part of this task).
    await _signal(limited, 10)
    rest = await limited.get_history(
        NS, "wf-1", task.run_id, len(task.events), 10_000, through_event_id=task.history_length
    )
    fetched = list(rest.events)
    while rest.has_more:
        rest = await limited.get_history(
            NS,
            "wf-1",
            task.run_id,
            len(task.events) + len(fetched),
            10_000,
            through_event_id=task.history_length,
        )
        fetched.extend(rest.events)
    assert task.events + fetched == whole[:9]
    completed = await limited.complete_workflow_task_tracked(
        NS, task.lease, task.history_length, [complete(1)]
    )
    assert completed.history_length == 12
