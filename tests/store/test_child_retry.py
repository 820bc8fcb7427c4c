"""A child started with a retry policy: a failed run is retried by the store as a new run
of the same child workflow id once the backoff passed on the database clock, attempts
are counted in WorkflowStarted.attempt, non-retryable failures end it, and the parent
sees only the final outcome (on every backend)."""

from __future__ import annotations

import pytest

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store import ClaimedWorkflowTask, StartOptions, Store
from durable_rpc.v1 import history_pb2, options_pb2, payload_pb2, workflow_task_pb2
from tests.store.helpers import (
    NS,
    QUEUE,
    claim,
    complete,
    events,
    history,
    kinds,
    payload,
    start,
    wait_db_time,
)

KIDS = "kids"
BACKOFF_MS = 300


def retry_policy(**fields: object) -> options_pb2.RetryPolicy:
    policy = options_pb2.RetryPolicy(**fields)  # type: ignore[arg-type]
    policy.initial_interval.FromMilliseconds(BACKOFF_MS)
    return policy


async def start_parent_with_kid(
    store: Store, policy: options_pb2.RetryPolicy, options: StartOptions | None = None
) -> str:
    if options is None:
        parent_run = await start(store, "parent")
    else:
        started = await store.start_workflow(
            NS, "parent", "Order", "1", QUEUE, payload(b"args"), "req-parent", options=options
        )
        parent_run = started.run_id
    task = await claim(store)
    spec = workflow_task_pb2.StartChildWorkflow(
        workflow_type="Kid",
        workflow_id="kid",
        task_queue=KIDS,
        input=payload_pb2.Payload(data=b"[7]"),
        retry_policy=policy,
    )
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [workflow_task_pb2.Command(seq=1, start_child_workflow=spec)],
    )
    return parent_run


async def claim_kid(store: Store) -> ClaimedWorkflowTask | None:
    return await store.claim_workflow_task(NS, KIDS, "kid-worker", 30_000)


def started_of(task: ClaimedWorkflowTask) -> history_pb2.WorkflowStarted:
    return events(task.events)[0].workflow_started


async def fail_kid(store: Store, task: ClaimedWorkflowTask, failure_type: str) -> int:
    """Fails the kid's run; returns the database time just after."""
    command = workflow_task_pb2.Command(
        seq=1,
        fail_workflow=workflow_task_pb2.FailWorkflow(
            failure=payload_pb2.Failure(message="kid broke", type=failure_type)
        ),
    )
    await store.complete_workflow_task(NS, task.lease, len(task.events), [command])
    return await store.now_ms()


def child_events(raw: list[bytes]) -> list[str]:
    return [k for k in kinds(raw) if k and k.startswith("child_workflow_")]


async def next_attempt(store: Store, failed_at: int) -> ClaimedWorkflowTask:
    """The retry's first workflow task: waiting until the backoff passed, then claimable."""
    early = await claim_kid(store)
    if early is not None:
        # Only when the database clock already passed the backoff (a slow machine).
        assert await store.now_ms() >= failed_at + BACKOFF_MS
        return early
    await wait_db_time(store, failed_at + BACKOFF_MS)
    await store.process_due()
    task = await claim_kid(store)
    assert task is not None, "the retry's workflow task is claimable after the backoff"
    return task


async def test_a_failed_child_is_retried_and_the_parent_sees_only_the_success(
    store: Store,
) -> None:
    parent_run = await start_parent_with_kid(store, retry_policy(maximum_attempts=3))
    first = await claim_kid(store)
    assert first is not None
    assert started_of(first).attempt == 1
    assert started_of(first).retry_policy.maximum_attempts == 3
    failed_at = await fail_kid(store, first, "Flaky")

    kid = await store.describe(NS, "kid", None)
    assert kid.info.status == "running" and kid.info.run_id != first.run_id
    second = await next_attempt(store, failed_at)
    started = started_of(second)
    assert second.run_id == kid.info.run_id
    assert (started.attempt, started.input.data) == (2, b"[7]")
    assert (started.parent_run_id, started.parent_seq) == (parent_run, 1)
    assert child_events(await history(store, "parent")) == [
        "child_workflow_initiated",
        "child_workflow_started",
    ], "the parent hears nothing of a retried failure"

    await store.complete_workflow_task(NS, second.lease, len(second.events), [complete(1)])
    closes = [
        e for e in events(await history(store, "parent")) if e.HasField("child_workflow_completed")
    ]
    assert [e.child_workflow_completed.run_id for e in closes] == [second.run_id]
    old = await store.describe(NS, "kid", first.run_id)
    assert old.info.status == "failed"


async def test_the_last_attempt_failure_reaches_the_parent(store: Store) -> None:
    await start_parent_with_kid(store, retry_policy(maximum_attempts=2))
    first = await claim_kid(store)
    assert first is not None
    failed_at = await fail_kid(store, first, "Flaky")
    second = await next_attempt(store, failed_at)
    assert started_of(second).attempt == 2
    await fail_kid(store, second, "Flaky")
    assert await claim_kid(store) is None
    assert (await store.describe(NS, "kid", None)).info.status == "failed"
    failed = [
        e.child_workflow_failed
        for e in events(await history(store, "parent"))
        if e.HasField("child_workflow_failed")
    ]
    assert [(f.run_id, f.failure.type) for f in failed] == [(second.run_id, "Flaky")]


async def test_a_non_retryable_failure_type_is_not_retried(store: Store) -> None:
    await start_parent_with_kid(
        store, retry_policy(maximum_attempts=5, non_retryable_error_types=["Fatal"])
    )
    first = await claim_kid(store)
    assert first is not None
    await fail_kid(store, first, "Fatal")
    assert (await store.describe(NS, "kid", None)).info.run_id == first.run_id
    assert child_events(await history(store, "parent"))[-1] == "child_workflow_failed"


async def test_a_bad_child_retry_policy_is_refused(store: Store) -> None:
    await start(store, "parent")
    task = await claim(store)
    spec = workflow_task_pb2.StartChildWorkflow(
        workflow_type="Kid",
        workflow_id="kid",
        retry_policy=options_pb2.RetryPolicy(backoff_coefficient=0.5),
    )
    with pytest.raises(InvalidArgumentError, match=r"retry_policy\.backoff_coefficient"):
        await store.complete_workflow_task(
            NS,
            task.lease,
            len(task.events),
            [workflow_task_pb2.Command(seq=1, start_child_workflow=spec)],
        )


async def test_a_retried_child_keeps_its_parents_priority_and_fairness_key(store: Store) -> None:
    await start_parent_with_kid(
        store, retry_policy(maximum_attempts=2), StartOptions(priority=1, fairness_key="t-1")
    )
    first = await claim_kid(store)
    assert first is not None
    failed_at = await fail_kid(store, first, "Oops")
    second = await next_attempt(store, failed_at)
    assert started_of(second).attempt == 2
    described = await store.describe(NS, "kid", second.run_id)
    assert (described.priority, described.fairness_key) == (1, "t-1")
