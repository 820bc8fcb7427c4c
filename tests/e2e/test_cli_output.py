"""What the workflow commands show a person: result --json for every outcome, history
with payloads decoded, describe with failures as type + message and the definition in
words. A real server process, a real worker in the test's loop, the CLI in a subprocess."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from durable_rpc import Client, RetryPolicy, Worker, activity, workflow
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ServerProcess, eventually
from tests.e2e.test_cli_errors import assert_one_line_error, assert_traceback

pytestmark = pytest.mark.timeout(120)

QUEUE = "cli-output"


@activity.defn
async def always_fails(order: str) -> str:
    raise RuntimeError(f"card declined for {order}")


@workflow.defn(name="Outcome")
class Outcome:
    """Closes the way its argument says (or waits, for cancel and terminate)."""

    @workflow.run
    async def run(self, how: str) -> Any:
        if how == "complete":
            return {"order": "o-1", "blob": b"\x00\x01", "total": 9.5}
        if how == "fail":
            raise workflow.ApplicationError("out of stock", type="SoldOut")
        if how == "retry":
            # Retried an hour later: its first failure stays the pending activity's.
            return await workflow.execute_activity(
                always_fails,
                "o-2",
                start_to_close_timeout=timedelta(seconds=5),
                retry_policy=RetryPolicy(initial_interval=timedelta(hours=1)),
            )
        await workflow.wait_condition(lambda: False)
        return None


@pytest.fixture
async def worker(client: Client) -> AsyncIterator[Worker]:
    async with Worker(
        client, task_queue=QUEUE, workflows=[Outcome], activities=[always_fails]
    ) as running:
        yield running


async def cli(server: ServerProcess, *args: str) -> Any:
    return await run_cli_async("workflow", *args, address=server.address)


async def result_json(server: ServerProcess, workflow_id: str) -> tuple[int, dict[str, Any]]:
    done = await cli(server, "result", workflow_id, "--timeout", "30", "--json")
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


async def test_result_json_is_json_for_every_outcome(
    server: ServerProcess, client: Client, worker: Worker
) -> None:
    for how in ("complete", "fail", "cancel", "terminate"):
        await client.start_workflow(Outcome.run, how, id=f"out-{how}", task_queue=QUEUE)
    await client.start_workflow(
        Outcome.run,
        "wait",
        id="out-timeout",
        task_queue=QUEUE,
        execution_timeout=timedelta(milliseconds=300),
    )
    await client.get_handle("out-cancel").cancel("changed my mind")
    await client.get_handle("out-terminate").terminate("by hand")

    assert await result_json(server, "out-complete") == (
        0,
        {
            "workflow_id": "out-complete",
            "status": "completed",
            "result": {"order": "o-1", "blob": {"$bytes": "AAE="}, "total": 9.5},
        },
    )
    code, failed = await result_json(server, "out-fail")
    assert code == 2 and failed["status"] == "failed" and failed["run_id"]
    assert failed["failure"]["type"] == "SoldOut"
    assert failed["failure"]["message"] == "out of stock"
    assert "stack_trace" not in failed["failure"]
    for workflow_id, status in (
        ("out-cancel", "cancelled"),
        ("out-terminate", "terminated"),
        ("out-timeout", "timed_out"),
    ):
        code, closed = await result_json(server, workflow_id)
        assert code == 2 and closed["status"] == status, closed
        assert closed["workflow_id"] == workflow_id and closed["run_id"] and closed["message"]


async def test_result_timeout_is_one_line_and_debug_shows_the_traceback(
    server: ServerProcess, client: Client
) -> None:
    # No worker: the run stays open past the command's --timeout.
    await client.start_workflow(Outcome.run, "wait", id="out-open", task_queue=QUEUE)
    args = ("workflow", "result", "out-open", "--timeout", "0.2")
    done = await run_cli_async(*args, address=server.address)
    assert_one_line_error(done, "still running after 0.2s", "--timeout")
    debug = await run_cli_async("--debug", *args, address=server.address)
    assert_traceback(debug, "TimeoutError")


async def test_history_json_decodes_payloads_and_raw_keeps_frames(
    server: ServerProcess, client: Client, worker: Worker
) -> None:
    handle = await client.start_workflow(
        Outcome.run, "complete", id="out-history", task_queue=QUEUE
    )
    await handle.result(timeout=30)
    decoded = json.loads((await cli(server, "history", "out-history", "--json")).stdout)
    events = decoded["events"]
    assert events[0]["workflowStarted"]["input"] == ["complete"]
    completed = next(e["workflowCompleted"] for e in events if "workflowCompleted" in e)
    assert completed["result"] == {"order": "o-1", "blob": {"$bytes": "AAE="}, "total": 9.5}
    raw = json.loads((await cli(server, "history", "out-history", "--json", "--raw")).stdout)
    frame = raw["events"][0]["workflowStarted"]["input"]
    assert set(frame) == {"data"} and isinstance(frame["data"], str)  # base64


async def test_describe_shows_failures_as_type_and_message_and_the_definition_in_words(
    server: ServerProcess, client: Client, worker: Worker
) -> None:
    handle = await client.start_workflow(Outcome.run, "retry", id="out-retry", task_queue=QUEUE)

    async def failed_once() -> bool:
        pending = (await handle.describe()).pending_activities
        return bool(pending) and pending[0].HasField("last_failure")

    await eventually(failed_once, what="the activity's first failure")
    brief = json.loads((await cli(server, "describe", "out-retry", "--json")).stdout)
    failure = brief["pending_activities"][0]["lastFailure"]
    assert failure == {"type": "RuntimeError", "message": "card declined for o-2"}
    verbose = json.loads((await cli(server, "describe", "out-retry", "--json", "-v")).stdout)
    assert "RuntimeError" in verbose["pending_activities"][0]["lastFailure"]["stack_trace"]
    table = " ".join((await cli(server, "describe", "out-retry")).stdout.split())
    assert "a live worker on the task queue registers this run's definition" in table
    assert "card declined for o-2" in table and "stack_trace" not in table


async def test_describe_explains_an_unavailable_definition_in_words(
    server: ServerProcess, client: Client
) -> None:
    # No worker polls the queue: describe says in words why nothing runs the run.
    await client.start_workflow(Outcome.run, "wait", id="out-orphan", task_queue=QUEUE)
    table = (await cli(server, "describe", "out-orphan")).stdout
    words = " ".join(table.split())
    assert "No live worker on task queue 'cli-output' registers workflow 'Outcome'" in words
    assert "start a worker that registers this definition" in words
