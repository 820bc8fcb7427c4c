"""Queries (@workflow.query, handle.query) against a real server and worker process:
answered by replaying the run, never appending to its history."""

from __future__ import annotations

import asyncio
import json

import pytest

from durable_rpc import Client
from durable_rpc.errors import QueryFailedError, QueryTimeoutError
from tests.e2e.conftest import ServerProcess, eventually
from tests.e2e.test_operability import cli
from tests.features import apps
from tests.features.conftest import FeatureWorker

pytestmark = pytest.mark.timeout(120)


def kinds(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.WhichOneof("attributes") for e in events]


async def settled_history(handle: object) -> list:  # type: ignore[type-arg]
    """The history once two reads 300 ms apart agree (no workflow task in flight)."""
    previous = await handle.history()  # type: ignore[attr-defined]
    while True:
        await asyncio.sleep(0.3)
        current = await handle.history()  # type: ignore[attr-defined]
        if current == previous:
            return list(current)
        previous = current


async def test_typed_queries_while_waiting_on_a_timer_append_nothing(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.start_workflow(apps.Counter.run, 300.0, id="q-1", task_queue=queue)

    async def sleeping() -> bool:
        return "timer_started" in kinds(await handle.history())

    await eventually(sleeping, what="the timer")
    await handle.signal(apps.Counter.add, "apple")
    await handle.signal(apps.Counter.add, "pear")
    before = await settled_history(handle)

    assert await handle.query(apps.Counter.count) == 2
    assert await handle.query(apps.Counter.items_from_index, 1, True) == ["PEAR"]
    assert await handle.query("items_from", 0, False) == ["apple", "pear"]
    tally = await handle.query(apps.Counter.tally)
    assert tally == apps.Tally("sleeping", ["apple", "pear"])
    assert isinstance(tally, apps.Tally)

    after = await handle.history()
    assert after == before, "a query must not append to the history"
    assert "timer_fired" not in kinds(after)
    assert (await handle.describe()).info.status == "running"


async def test_unknown_and_failing_queries_are_clear_errors(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.start_workflow(apps.Counter.run, 300.0, id="q-2", task_queue=queue)
    with pytest.raises(QueryFailedError) as unknown:
        await handle.query("no_such_query")
    assert unknown.value.reason == "QUERY_FAILED"
    assert "no_such_query" in unknown.value.message and "QueryNotFound" in unknown.value.message
    assert "count" in unknown.value.message  # the known ones are listed

    with pytest.raises(QueryFailedError, match="ValueError: this query is broken"):
        await handle.query(apps.Counter.broken)
    with pytest.raises(QueryFailedError, match=r"time\.time\(\).*workflow\.now\(\)"):
        await handle.query(apps.Counter.wall_clock)

    # None of that touched the run.
    description = await handle.describe()
    assert description.info.status == "running"
    assert description.last_workflow_task_failure is None
    assert await handle.query(apps.Counter.count) == 0


async def test_a_closed_run_can_be_queried(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.start_workflow(apps.Counter.run, 0.1, id="q-3", task_queue=queue)
    await handle.signal(apps.Counter.add, "fig")
    await handle.signal(apps.Counter.finish)
    assert await handle.result(timeout=30) == 1
    length = len(await handle.history())
    assert await handle.query(apps.Counter.tally) == apps.Tally("done", ["fig"])
    assert len(await handle.history()) == length


async def test_a_query_nobody_answers_times_out(client: Client, queue: str) -> None:
    # No worker polls this queue.
    handle = await client.start_workflow(apps.Counter.run, 1.0, id="q-4", task_queue=queue)
    with pytest.raises(QueryTimeoutError, match="no worker answered query 'count'"):
        await handle.query(apps.Counter.count, timeout=0.5)


def test_the_cli_asks_a_query(server: ServerProcess, worker: FeatureWorker, queue: str) -> None:
    async def start_and_signal() -> None:
        client = await Client.connect(server.address)
        try:
            handle = await client.start_workflow(
                apps.Counter.run, 300.0, id="q-cli", task_queue=queue
            )
            await handle.signal(apps.Counter.add, "fig")
        finally:
            await client.close()

    asyncio.run(start_and_signal())
    asked = cli(server, "query", "q-cli", "items_from", "--input", "[0, true]", "--json")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout) == {"result": ["FIG"]}
    plain = cli(server, "query", "q-cli", "count")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == 1
    unknown = cli(server, "query", "q-cli", "no_such_query")
    assert unknown.returncode != 0 and "QUERY_FAILED" in unknown.stderr
