"""PostgreSQL's hot path (``store/_pg_hot``): a decision (a workflow-task completion, or an
activity completion with an inline decision) recorded by one server-side function call
must leave exactly what the general path
(separate statements) leaves — the same history bytes up to the commit times, the same
task and run rows, the same answer, the same notifications to other replicas — and must
hand every case it does not cover back to the general path with nothing written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from durable_rpc.errors import WorkflowAlreadyStartedError
from durable_rpc.store import (
    ActivityCompletion,
    ClaimedActivityTask,
    ClaimedWorkflowTask,
    DirectClaim,
    EagerActivities,
    InlineWorkflowTask,
    StartResult,
    Store,
    open_store,
)
from durable_rpc.store._logic import make_event
from durable_rpc.v1 import history_pb2, options_pb2, workflow_task_pb2
from tests.scale import cluster as pg
from tests.store.conftest import FAST
from tests.store.helpers import (
    NS,
    QUEUE,
    RecordingListener,
    activity_options,
    claim,
    complete,
    eventually,
    history,
    payload,
    schedule,
    start,
)

pytestmark = pytest.mark.skipif(not pg.available(), reason="needs PostgreSQL")

EAGER = EagerActivities(QUEUE, frozenset({"act"}), 1)


@dataclass
class Pair:
    """The same scenario on two databases: hot path on, and off."""

    hot: Store
    general: Store
    hot_url: str
    general_url: str


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    cluster = pg.require_cluster()
    hot_url, general_url = cluster.create_database(), cluster.create_database()
    hot = open_store(hot_url, FAST)
    general = open_store(general_url + "?hot_path=off", FAST)
    await hot.open()
    await general.open()
    try:
        yield Pair(hot, general, hot_url, general_url)
    finally:
        await hot.close()
        await general.close()
        cluster.drop_database(hot_url)
        cluster.drop_database(general_url)


def _options() -> options_pb2.ActivityOptions:
    options = activity_options(start_to_close_ms=4_000, schedule_to_close_ms=9_000)
    options.schedule_to_start_timeout.FromMilliseconds(7_000)
    return options


def _traced(seq: int, activity_type: str, queue: str = "") -> workflow_task_pb2.Command:
    command = schedule(seq, activity_type, _options())
    command.schedule_activity.task_queue = queue
    command.schedule_activity.trace_context["traceparent"] = "00-aa-bb-01"
    return command


async def _scenario(store: Store) -> tuple[str, list[ActivityCompletion]]:
    """(a warm-up start: a store learns its namespaces from the general path) start →
    first decision (activity 1, eager) → activity 1 completes with an inline
    decision scheduling activity 2 (eager) and 3 (another queue) → activity 2 completes
    with an inline decision closing the run (activity 3 is cancelled)."""
    await start(store, "warm-up", queue="warm")
    run_id = await start(store)
    task = await claim(store)
    first = await store.complete_workflow_task_tracked(
        NS, task.lease, 1, [schedule(1, "act")], eager=EAGER
    )
    [one] = first.eager_activities
    answers = []
    inline = InlineWorkflowTask(
        run_id,
        first.history_length,
        [_traced(2, "act"), _traced(3, "other", "q2")],
        build_id="b7",
        eager=EAGER,
    )
    answers.append(
        await store.complete_activity_task_inline(NS, one.lease, payload(b"r1"), inline=inline)
    )
    done = answers[0].inline
    assert done is not None
    [two] = done.eager_activities
    closing = InlineWorkflowTask(run_id, done.history_length, [complete(4, b"bye")], "b7", EAGER)
    answers.append(
        await store.complete_activity_task_inline(NS, two.lease, payload(b"r2"), inline=closing)
    )
    return run_id, answers


def _timeless(raw: bytes) -> history_pb2.HistoryEvent:
    event = history_pb2.HistoryEvent.FromString(raw)
    event.ClearField("event_time")
    if event.HasField("workflow_started"):  # a fresh run id in each database
        event.workflow_started.ClearField("run_id")
    if event.HasField("workflow_task_completed"):
        event.workflow_task_completed.ClearField("workflow_time")
    return event


def _claim_view(task: ClaimedActivityTask) -> tuple[Any, ...]:
    return (
        task.worker_id,
        task.fencing_token,
        task.seq,
        task.activity_type,
        task.input,
        task.attempt,
        task.heartbeat_details,
        task.heartbeat_timeout_ms,
        task.start_to_close_timeout_ms,
        task.options,
        task.trace_context,
        task.workflow_id,
    )


def _rows(url: str, sql: str) -> list[dict[str, Any]]:
    with psycopg.connect(url, row_factory=dict_row) as conn:
        return conn.execute(sql).fetchall()


_TASK_COLUMNS = (
    "kind, task_queue, state, seq, activity_type, input, options, lease_ms, "
    "start_to_close_ms, attempt, fencing_token, worker_id, outcome_kind, outcome_token, "
    "cancel_requested, trace_context, due_ms IS NULL AS no_due, "
    "expires_at_ms - claimed_at_ms AS lease_length, "
    "attempt_deadline_ms - claimed_at_ms AS attempt_deadline, "
    "schedule_to_close_deadline_ms - created_at_ms AS close_deadline, "
    "queue_deadline_ms - created_at_ms AS queue_deadline"
)
# A run's history size is compared with its own events' (the sum the general path keeps),
# not across the two stores: an event's bytes depend on its timestamp (a Timestamp's nanos
# are a varint, omitted when zero), so two equal histories written a millisecond apart
# may differ by a few bytes (seen once: 133 against 131).
_RUN_COLUMNS = (
    "status, result, failure, history_length, "
    "history_size_bytes = (SELECT COALESCE(SUM(length(h.data)), 0) FROM history h "
    "WHERE h.namespace = runs.namespace AND h.run_id = runs.run_id) AS size_is_its_events, "
    "wft_attempt, last_wft_failure, pending_updates, deadline_ms, "
    "close_time_ms IS NULL AS open"
)


async def test_the_function_leaves_what_the_general_path_leaves(pair: Pair) -> None:
    (hot_run, hot), (general_run, general) = await asyncio.gather(
        _scenario(pair.hot), _scenario(pair.general)
    )
    # The start, the first decision and both inline ones.
    assert pair.hot.stats.hot_calls == 4
    assert pair.general.stats.hot_calls == 0

    hot_history, general_history = await history(pair.hot), await history(pair.general)
    assert [_timeless(e) for e in hot_history] == [_timeless(e) for e in general_history]
    # Byte for byte what make_event serializes (the function builds events itself).
    for raw in hot_history:
        event = history_pb2.HistoryEvent.FromString(raw)
        kind = event.WhichOneof("attributes")
        assert kind is not None
        expected = make_event(
            event.event_id, event.event_time.ToMilliseconds(), kind, getattr(event, kind)
        )
        assert raw == expected, kind

    for h, g in zip(hot, general, strict=True):
        assert h.workflow_task is None and g.workflow_task is None
        assert h.inline is not None and g.inline is not None
        assert [_timeless(e) for e in h.inline.appended_events] == [
            _timeless(e) for e in g.inline.appended_events
        ]
        assert h.inline.history_length == g.inline.history_length
        assert [_claim_view(t) for t in h.inline.eager_activities] == [
            _claim_view(t) for t in g.inline.eager_activities
        ]
    assert hot[-1].inline is not None and hot[-1].inline.appended_events == hot_history[-3:]

    order = " ORDER BY kind, seq NULLS FIRST"
    assert _rows(pair.hot_url, f"SELECT {_TASK_COLUMNS} FROM tasks{order}") == _rows(
        pair.general_url, f"SELECT {_TASK_COLUMNS} FROM tasks{order}"
    )
    runs = f"SELECT workflow_id, {_RUN_COLUMNS} FROM runs ORDER BY workflow_id"
    assert _rows(pair.hot_url, runs) == _rows(pair.general_url, runs)
    for store, run_id in ((pair.hot, hot_run), (pair.general, general_run)):
        outcome = await store.get_outcome(NS, "wf-1", run_id)
        assert (outcome.status, outcome.result) == ("completed", payload(b"bye"))


async def test_other_replicas_hear_what_the_function_committed(pair: Pair) -> None:
    other = open_store(pair.hot_url, FAST)
    heard = RecordingListener()
    other.set_listener(heard)
    await other.open()
    try:
        run_id, _ = await _scenario(pair.hot)

        def everything() -> bool | None:
            wanted = (NS, "q2", "activity") in heard.tasks and (NS, run_id) in heard.closed
            return wanted or None

        async def poll() -> bool | None:
            await heard.changed.wait()
            heard.changed.clear()
            return everything()

        if not everything():
            await eventually(poll, what="the function's NOTIFY on the other replica")
        # The eagerly leased activity 2 went to its worker: nobody on q1 was woken for it.
        assert (NS, QUEUE, "activity") not in heard.tasks
        assert heard.due, "the leases' and deadlines' due times"
    finally:
        await other.close()


async def test_uncovered_cases_run_the_general_path_with_nothing_kept(pair: Pair) -> None:
    store = pair.hot
    run_id = await start(store)
    task = await claim(store)
    first = await store.complete_workflow_task_tracked(
        NS, task.lease, 1, [schedule(1, "act")], eager=EAGER
    )
    [one] = first.eager_activities
    calls = store.stats.hot_calls
    # A signal arrived meanwhile: the worker's copy of the history is stale.
    assert await store.signal_workflow(NS, "wf-1", None, "go", payload(b"s"), "sig-1")
    stale = InlineWorkflowTask(run_id, first.history_length, [complete(2)], eager=EAGER)
    done = await store.complete_activity_task_inline(NS, one.lease, payload(b"r1"), inline=stale)
    assert done.inline is None  # the completion alone, as the general path decides
    assert store.stats.hot_calls == calls
    kinds = [e.WhichOneof("attributes") for e in map(_timeless, await history(store))]
    assert kinds[-2:] == ["signal_received", "activity_completed"]
    # The repeat of that completion is the general path's idempotent success.
    again = await store.complete_activity_task_inline(NS, one.lease, payload(b"r1"), inline=stale)
    assert again.inline is None and again.workflow_task is None
    assert len(await history(store)) == len(kinds)


async def _direct_start(store: Store, worker: str) -> StartResult:
    await start(store, "warm-up", queue="warm")
    return await store.start_workflow(
        NS,
        "wf-direct",
        "Order",
        "1",
        QUEUE,
        payload(b"in"),
        "req-direct",
        {"traceparent": "00-cc-dd-01"},
        claim_for=DirectClaim(worker, 30_000),
    )


def _task_view(task: ClaimedWorkflowTask | None) -> tuple[Any, ...] | None:
    if task is None:
        return None
    return (
        task.worker_id,
        task.fencing_token,
        task.lease_expires_at_ms - task.workflow_time_ms,
        task.attempt,
        task.workflow_id,
        task.workflow_type,
        task.workflow_version,
        task.task_queue,
        [_timeless(e) for e in task.events],
        task.pending_updates,
        task.history_length,
        # Its events' own size: an event's time is encoded in fewer bytes at some
        # milliseconds than at others, so two starts' sizes may differ by a byte or two.
        task.history_size_bytes == sum(len(e) for e in task.events),
    )


async def test_a_start_with_its_claim_is_what_the_general_path_does(pair: Pair) -> None:
    for store in (pair.hot, pair.general):  # its fingerprint goes into WorkflowStarted
        await store.register_worker(NS, "w1", QUEUE, [("Order", "1", "fp-1")], [], "", False)
    hot, general = await asyncio.gather(
        _direct_start(pair.hot, "w1"), _direct_start(pair.general, "w1")
    )
    assert pair.hot.stats.hot_calls == 2 and pair.general.stats.hot_calls == 0  # + warm-up
    assert hot.started and general.started and hot.workflow_task is not None
    assert _task_view(hot.workflow_task) == _task_view(general.workflow_task)
    [raw] = hot.workflow_task.events
    event = history_pb2.HistoryEvent.FromString(raw)
    assert raw == make_event(
        1, event.event_time.ToMilliseconds(), "workflow_started", event.workflow_started
    )
    assert event.workflow_started.run_id == hot.run_id
    assert event.workflow_started.definition_fingerprint == "fp-1"
    assert await history(pair.hot, "wf-direct") == [raw]
    runs = f"SELECT workflow_id, {_RUN_COLUMNS} FROM runs ORDER BY workflow_id"
    assert _rows(pair.hot_url, runs) == _rows(pair.general_url, runs)
    order = " ORDER BY kind, seq NULLS FIRST, task_id"
    tasks = f"SELECT {_TASK_COLUMNS}, workflow_type, workflow_version FROM tasks{order}"
    assert _rows(pair.hot_url, tasks) == _rows(pair.general_url, tasks)


async def test_a_worker_that_does_not_serve_the_run_gets_no_claim(pair: Pair) -> None:
    store = pair.hot
    await store.register_worker(NS, "w-other", QUEUE, [("Other", "1", "fp")], [], "", False)
    done = await _direct_start(store, "w-other")
    assert done.started and done.workflow_task is None
    assert store.stats.hot_calls == 2  # the warm-up start and this one
    # The task stays queued for a worker that serves it.
    task = await claim(store, "w1")
    assert task.run_id == done.run_id


async def test_repeated_and_conflicting_starts_take_the_general_path(pair: Pair) -> None:
    store = pair.hot
    first = await start(store, "warm-up", queue="warm")
    again = await store.start_workflow(
        NS, "warm-up", "Order", "1", QUEUE, payload(b"args"), "req-warm-up"
    )
    assert (again.run_id, again.started) == (first, False)  # the earlier run, nothing new
    with pytest.raises(WorkflowAlreadyStartedError):
        await store.start_workflow(NS, "warm-up", "Order", "1", QUEUE, payload(b"x"), "req-2")
    assert store.stats.hot_calls == 0
    assert len(await history(store, "warm-up")) == 1


async def _configure_flow_control(store: Store, permits: int, slots: int) -> None:
    """A limit of ``slots`` on the run's queue, a rate limit of ``permits`` an hour (that
    burst) on activity type ``act``, an admission policy of 1,000 open runs and starts."""
    await store.set_task_queue_limit(NS, QUEUE, slots)
    await store.set_rate_limit(NS, "activity_type", "act", permits, 3_600_000)
    await store.set_namespace_admission(NS, 1_000, 1_000, 3_600_000, "queue")


async def test_flow_control_that_does_not_bind_stays_on_the_function(pair: Pair) -> None:
    for store in (pair.hot, pair.general):
        await _configure_flow_control(store, permits=1_000, slots=1_000)
    await asyncio.gather(_scenario(pair.hot), _scenario(pair.general))
    # Both starts, the decision and both inline ones (setting the limits taught the store
    # the namespace: the warm-up start is the function's too).
    assert pair.hot.stats.hot_calls == 5
    order = " ORDER BY kind, seq NULLS FIRST"
    assert _rows(pair.hot_url, f"SELECT {_TASK_COLUMNS} FROM tasks{order}") == _rows(
        pair.general_url, f"SELECT {_TASK_COLUMNS} FROM tasks{order}"
    )
    runs = f"SELECT workflow_id, {_RUN_COLUMNS}, admission FROM runs ORDER BY workflow_id"
    assert _rows(pair.hot_url, runs) == _rows(pair.general_url, runs)
    # Both took the same tokens: the two eager claims' and the two starts'.
    taken = (
        "SELECT (tat_us - updated_at_ms * 1000) / interval_us AS claims, "
        "(SELECT round(tokens) FROM namespace_admission) AS starts_left FROM rate_limits"
    )
    assert _rows(pair.hot_url, taken) == _rows(pair.general_url, taken)
    assert _rows(pair.hot_url, taken)[0]["starts_left"] == 998


async def _two_eager(store: Store) -> list[ClaimedActivityTask]:
    """A start, then a decision scheduling two ``act`` activities, both asked eagerly."""
    await start(store, "warm-up", queue="warm")
    await start(store)
    task = await claim(store)
    done = await store.complete_workflow_task_tracked(
        NS,
        task.lease,
        1,
        [schedule(1, "act"), schedule(2, "act")],
        eager=EagerActivities(QUEUE, frozenset({"act"}), 2),
    )
    return done.eager_activities


@pytest.mark.parametrize(
    ("permits", "slots", "deferred"),
    [(1, 1_000, "rate_deferred_claims"), (1_000, 1, "deferred_claims")],
    ids=["rate limit", "queue limit"],
)
async def test_a_binding_limit_defers_an_eager_claim_as_the_general_path_does(
    pair: Pair, permits: int, slots: int, deferred: str
) -> None:
    other = open_store(pair.hot_url, FAST)
    heard = RecordingListener()
    other.set_listener(heard)
    await other.open()
    try:
        for store in (pair.hot, pair.general):
            await _configure_flow_control(store, permits=permits, slots=slots)
        hot, general = await asyncio.gather(_two_eager(pair.hot), _two_eager(pair.general))
        assert pair.hot.stats.hot_calls == 3  # both starts and the decision
        assert [_claim_view(t) for t in hot] == [_claim_view(t) for t in general]
        assert [t.seq for t in hot] == [1]  # the second stays queued for the polls
        assert getattr(pair.hot.stats, deferred) == getattr(pair.general.stats, deferred) == 1
        order = " ORDER BY kind, seq NULLS FIRST"
        assert _rows(pair.hot_url, f"SELECT {_TASK_COLUMNS} FROM tasks{order}") == _rows(
            pair.general_url, f"SELECT {_TASK_COLUMNS} FROM tasks{order}"
        )

        async def woken() -> bool | None:
            if (NS, QUEUE, "activity") in heard.tasks:
                return True
            await heard.changed.wait()
            heard.changed.clear()
            return None

        # The queued one's polls are woken on every replica.
        await eventually(woken, what="the queue's wake-up on the other replica")
    finally:
        await other.close()


async def test_admission_that_binds_is_the_general_path_s(pair: Pair) -> None:
    store = pair.hot
    await start(store, "warm-up", queue="warm")  # the store learns the namespace
    await store.set_namespace_admission(NS, 2, None, None, "queue")
    await start(store, "wf-1")
    assert store.stats.hot_calls == 1  # admitted by the function
    await start(store, "wf-2")
    assert store.stats.hot_calls == 1  # over the limit: deferred by the general path
    waiting = "SELECT workflow_id, admission FROM runs ORDER BY workflow_id"
    assert [r["admission"] for r in _rows(pair.hot_url, waiting)] == [None, None, "deferred"]
    task = await claim(store)
    assert task.workflow_id == "wf-1"  # the deferred run has no workflow task
    await store.complete_workflow_task_tracked(NS, task.lease, 1, [complete(1, b"ok")])
    assert store.stats.hot_calls == 1  # a run waits: its close admits it on the general path
    assert [r["admission"] for r in _rows(pair.hot_url, waiting)] == [None, None, None]
    assert (await claim(store)).workflow_id == "wf-2"


async def test_a_function_replaced_by_a_newer_version_leaves_the_general_path(pair: Pair) -> None:
    # A newer version's migration may give a function another signature while this
    # replica still runs: its calls then find no such function.
    with psycopg.connect(pair.hot_url, autocommit=True) as conn:
        conn.execute("ALTER FUNCTION drpc_record_decision RENAME TO drpc_record_decision_next")
    run_id, answers = await _scenario(pair.hot)
    assert pair.hot.stats.hot_calls == 1  # the start's function is still there
    assert [a.inline is not None for a in answers] == [True, True]
    outcome = await pair.hot.get_outcome(NS, "wf-1", run_id)
    assert (outcome.status, outcome.result) == ("completed", payload(b"bye"))
