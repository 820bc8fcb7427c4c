"""Hello, durable world: a workflow that calls two activities, one of which fails once.

Start a server (``durable-rpc server``), then run ``python examples/hello_world.py``.
It connects to $DURABLE_RPC_ADDRESS (default 127.0.0.1:7233), runs a worker in this
process, starts the workflow, prints its result and exits 0.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from durable_rpc import Client, RetryPolicy, Worker, activity, workflow

attempts: dict[str, int] = {}


@activity.defn
async def say_hello(name: str) -> str:
    return f"Hello, {name}!"


@activity.defn
async def say_goodbye(name: str) -> str:
    # Fails on its first attempt to show a retry; the workflow never notices.
    attempts[name] = attempts.get(name, 0) + 1
    if attempts[name] == 1:
        raise RuntimeError("transient failure, will be retried")
    return f"Goodbye, {name}!"


@workflow.defn(name="HelloWorkflow")
class HelloWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        hello = await workflow.execute_activity(
            say_hello, name, start_to_close_timeout=timedelta(seconds=10)
        )
        goodbye = await workflow.execute_activity(
            say_goodbye,
            name,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=100)),
        )
        return f"{hello} {goodbye}"


async def main() -> None:
    client = await Client.connect()
    async with Worker(
        client,
        task_queue="hello",
        workflows=[HelloWorkflow],
        activities=[say_hello, say_goodbye],
    ):
        handle = await client.start_workflow(
            HelloWorkflow.run, "World", id=f"hello-{uuid.uuid4().hex[:8]}", task_queue="hello"
        )
        print(await handle.result())
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
