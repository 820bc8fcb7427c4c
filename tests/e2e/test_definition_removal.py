"""`durable-rpc definition list|remove|restore` against a real server process: the
deployment runbook's last step -- remove a definition only when no
live worker registers it and no open run references it; a removed one is refused at
registration and at start until restored."""

from __future__ import annotations

import json

import pytest

from durable_rpc import Client, Worker, workflow
from durable_rpc.errors import DefinitionRemovedError
from tests.cli_process import checked, run_cli_async
from tests.e2e.conftest import ServerProcess, eventually

pytestmark = pytest.mark.timeout(180)
QUEUE = "greetings"


@workflow.defn(name="Greeter")
class Greeter:
    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self, name: str) -> str:
        await workflow.wait_condition(lambda: self.go)
        return f"hello {name}"


async def listed(server: ServerProcess) -> dict[str, object]:
    shown = await run_cli_async("definition", "list", "--json", address=server.address)
    (greeter,) = json.loads(checked(shown))["definitions"]
    assert isinstance(greeter, dict)
    return greeter


async def test_remove_only_what_nothing_references_and_restore(
    server: ServerProcess, client: Client
) -> None:
    worker = Worker(client, task_queue=QUEUE, workflows=[Greeter], worker_id="greeter-1")
    async with worker:
        handle = await client.start_workflow("Greeter", "ann", id="open", task_queue=QUEUE)

        async def waiting() -> bool:
            # The run's first decision is recorded: it waits for its signal.
            return (await listed(server)).get("waitingRuns") == "1"

        await eventually(waiting, what="the open run to wait")
        greeter = await listed(server)
        assert greeter["name"] == "Greeter" and greeter["version"] == "1"
        assert greeter["liveWorkerIds"] == ["greeter-1"]
        table = checked(
            await run_cli_async(
                "definition", "list", address=server.address, env={"COLUMNS": "200"}
            )
        )
        assert "Greeter" in table and "greeter-1" in table

        refused = await run_cli_async("definition", "remove", "Greeter", address=server.address)
        assert refused.returncode == 1
        assert "DEFINITION_IN_USE" in refused.stderr
        assert "live workers register it (greeter-1)" in refused.stderr
        assert "1 open runs reference it (0 queued, 0 leased, 0 recoverable, 1 waiting)" in (
            refused.stderr
        )
    await handle.terminate("the runbook: no run may reference it")

    removed = await run_cli_async(
        "definition", "remove", "Greeter", "--json", address=server.address
    )
    assert "removeTime" in json.loads(checked(removed))["definition"]
    assert "removeTime" in await listed(server)

    with pytest.raises(DefinitionRemovedError, match="definition restore Greeter --version 1"):
        await Worker(client, task_queue=QUEUE, workflows=[Greeter]).register()
    with pytest.raises(DefinitionRemovedError, match="cannot be started"):
        await client.start_workflow("Greeter", "bob", id="after", task_queue=QUEUE)

    checked(await run_cli_async("definition", "restore", "Greeter", address=server.address))
    assert "removeTime" not in await listed(server)
    async with Worker(client, task_queue=QUEUE, workflows=[Greeter]):
        again = await client.start_workflow("Greeter", "bob", id="after", task_queue=QUEUE)
        await again.signal("proceed")
        assert await again.result() == "hello bob"
