"""workflow.execute_child_workflow(..., retry_policy=...) on the time-skipping
environment (a real server and worker): a child that fails twice is retried as new runs
of the same id after the backoff, the parent gets the third attempt's result and no
trace of the failures, and a non-retryable error type fails the parent's await at once."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from durable_rpc import ApplicationError, Worker, workflow
from durable_rpc.testing import WorkflowEnvironment
from durable_rpc.workflow import ChildWorkflowError, RetryPolicy

pytestmark = pytest.mark.timeout(60)

#: Run ids of the flaky child, by child workflow id (the worker runs in this process).
RUNS: dict[str, list[str]] = {}


@workflow.defn(name="FlakyKid")
class FlakyKid:
    @workflow.run
    async def run(self, fail_times: int, error_type: str) -> str:
        info = workflow.info()
        runs = RUNS.setdefault(info.workflow_id, [])
        if info.run_id not in runs:
            runs.append(info.run_id)
        attempt = runs.index(info.run_id) + 1
        if attempt <= fail_times:
            raise ApplicationError(f"attempt {attempt} broke", type=error_type)
        return f"ok after {attempt} runs"


@workflow.defn(name="RetryingParent")
class RetryingParent:
    @workflow.run
    async def run(self, kid_id: str, fail_times: int, error_type: str) -> str:
        try:
            return await workflow.execute_child_workflow(
                FlakyKid.run,
                fail_times,
                error_type,
                id=kid_id,
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(minutes=10),
                    maximum_attempts=5,
                    non_retryable_error_types=["Fatal"],
                ),
            )
        except ChildWorkflowError as error:
            return f"child failed: {error.cause.message}"


async def run_parent(fail_times: int, error_type: str) -> tuple[str, str, WorkflowEnvironment]:
    kid_id = f"kid-{uuid.uuid4().hex[:6]}"
    env = await WorkflowEnvironment.start_time_skipping()
    async with Worker(env.client, task_queue="q", workflows=[RetryingParent, FlakyKid]):
        handle = await env.client.start_workflow(
            RetryingParent.run, kid_id, fail_times, error_type, id=f"p-{kid_id}", task_queue="q"
        )
        result = await handle.result(timeout=30)
    return kid_id, result, env


async def test_a_failing_child_is_retried_and_the_parent_gets_the_last_result() -> None:
    kid_id, result, env = await run_parent(2, "Flaky")
    async with env:
        assert result == "ok after 3 runs"
        kid = env.client.get_handle(kid_id)
        started = (await kid.history())[0].workflow_started
        assert started.attempt == 3
        assert started.retry_policy.maximum_attempts == 5
        # Two backoffs of 10 and 20 minutes passed on the (skipped) server clock.
        description = await kid.describe()
        assert description.info.status == "completed"
        parent = env.client.get_handle(f"p-{kid_id}")
        kinds = [e.WhichOneof("attributes") for e in await parent.history()]
        assert "child_workflow_failed" not in kinds
        assert kinds.count("child_workflow_completed") == 1


async def test_a_non_retryable_error_type_reaches_the_parent_at_once() -> None:
    kid_id, result, env = await run_parent(2, "Fatal")
    async with env:
        assert result == "child failed: attempt 1 broke"
        started = (await env.client.get_handle(kid_id).history())[0].workflow_started
        assert started.attempt == 1
