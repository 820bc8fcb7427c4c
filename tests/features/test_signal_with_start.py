"""Signal-with-start against a real server: start-or-signal in one transaction."""

from __future__ import annotations

import pytest

from durable_rpc import Client
from tests.cli_process import checked, run_cli_async
from tests.e2e.conftest import ServerProcess
from tests.features import apps
from tests.features.conftest import FeatureWorker

pytestmark = pytest.mark.timeout(120)


def kinds(events: list) -> list[str]:  # type: ignore[type-arg]
    return [e.WhichOneof("attributes") for e in events]


async def test_starts_a_run_that_sees_the_signal_before_its_main_method(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    handle = await client.signal_with_start_workflow(
        apps.Cart.run,
        "ann",
        id="cart-1",
        task_queue=queue,
        signal=apps.Cart.add,
        signal_args=["apple"],
    )
    history = await handle.history()
    assert kinds(history)[:2] == ["workflow_started", "signal_received"]
    await handle.signal(apps.Cart.add, "checkout")
    result = await handle.result(timeout=30)
    assert result == {"owner": ["ann"], "at_start": ["apple"], "items": ["apple"]}


async def test_signals_the_open_run_instead_of_starting_another(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    first = await client.start_workflow(apps.Cart.run, "bob", id="cart-2", task_queue=queue)
    second = await client.signal_with_start_workflow(
        apps.Cart.run,
        "someone-else",
        id="cart-2",
        task_queue=queue,
        signal=apps.Cart.add,
        signal_args=["pear"],
    )
    assert second.run_id == first.run_id
    await client.signal_with_start_workflow(
        apps.Cart.run,
        "x",
        id="cart-2",
        task_queue=queue,
        signal="add",
        signal_args=["checkout"],
    )
    result = await first.result(timeout=30)
    assert result["owner"] == ["bob"] and result["items"] == ["pear"]


async def test_a_repeated_request_id_delivers_once(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    calls = [
        client.signal_with_start_workflow(
            apps.Cart.run,
            "cy",
            id="cart-3",
            task_queue=queue,
            signal=apps.Cart.add,
            signal_args=["plum"],
            request_id="req-1",
        )
        for _ in range(3)
    ]
    handles = [await call for call in calls]
    assert len({h.run_id for h in handles}) == 1
    history = await handles[0].history()
    assert kinds(history).count("signal_received") == 1
    assert kinds(history).count("workflow_started") == 1
    await handles[0].signal(apps.Cart.add, "checkout")
    assert (await handles[0].result(timeout=30))["items"] == ["plum"]


async def test_after_the_run_closed_a_new_request_starts_a_new_run(
    client: Client, worker: FeatureWorker, queue: str
) -> None:
    first = await client.signal_with_start_workflow(
        apps.Cart.run,
        "dee",
        id="cart-4",
        task_queue=queue,
        signal="add",
        signal_args=["checkout"],
        request_id="a",
    )
    await first.result(timeout=30)
    again = await client.signal_with_start_workflow(
        apps.Cart.run,
        "dee",
        id="cart-4",
        task_queue=queue,
        signal="add",
        signal_args=["checkout"],
        request_id="a",
    )
    assert again.run_id == first.run_id, "a retried request returns the run it started"
    fresh = await client.signal_with_start_workflow(
        apps.Cart.run,
        "dee",
        id="cart-4",
        task_queue=queue,
        signal="add",
        signal_args=["checkout"],
        request_id="b",
    )
    assert fresh.run_id != first.run_id
    assert (await fresh.result(timeout=30))["at_start"] == []


async def test_cli_signal_with_start(
    server: ServerProcess, client: Client, worker: FeatureWorker, queue: str
) -> None:
    async def cli(*args: str) -> str:
        return checked(
            await run_cli_async("workflow", *args, "--address", server.address, "--json")
        )

    await cli(
        "signal-with-start",
        "Cart",
        "add",
        "--id",
        "cart-5",
        "--task-queue",
        queue,
        "--input",
        '["eve"]',
        "--signal-input",
        '["fig"]',
    )
    await cli(
        "signal-with-start",
        "Cart",
        "add",
        "--id",
        "cart-5",
        "--task-queue",
        queue,
        "--signal-input",
        '["checkout"]',
    )
    result = await client.get_handle("cart-5").result(timeout=30)
    assert result == {"owner": ["eve"], "at_start": ["fig"], "items": ["fig"]}
