"""Workflows and activities for the end-to-end tests, runnable as a worker process:

    python -m tests.e2e.apps ADDRESS TASK_QUEUE [--release] [--variant v1|v2] [--namespace NS]

Activities append one line per execution to $DURABLE_RPC_TEST_LOG so tests can count
executions across processes. A "blocking" activity waits forever unless the worker was
started with --release (or is sent SIGUSR1): the way a test holds an attempt open before
killing its worker, or its server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
import uuid
from datetime import timedelta

from durable_rpc import (
    AmbiguousEffectError,
    CancellationToken,
    Client,
    RetryPolicy,
    Worker,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
    activity,
    workflow,
)

RELEASED = False
# Set when the worker runs with --release; blocked activities wait on it.
_release = asyncio.Event()


def record(line: str) -> None:
    path = os.environ.get("DURABLE_RPC_TEST_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{line} pid={os.getpid()}\n")
            fh.flush()
            os.fsync(fh.fileno())


async def _block_unless_released() -> None:
    if not RELEASED:
        await _release.wait()


@activity.defn
async def step(name: str) -> str:
    record(f"step:{name}")
    return f"done:{name}"


@activity.defn
async def slow_step(name: str) -> str:
    record(f"slow_step-start:{name}")
    await _block_unless_released()
    record(f"slow_step-end:{name}")
    return f"done:{name}"


@activity.defn
async def charge_card(amount: int) -> str:
    record(f"charge-start:{amount}")
    await _block_unless_released()
    return f"charged:{amount}"


@activity.defn
async def nap(name: str, seconds: float) -> str:
    record(f"nap-start:{name}")
    # Heartbeats while it sleeps: only a pause of the whole process lets its lease lapse.
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        activity.heartbeat(name)
        await asyncio.sleep(min(left, 0.2))
    record(f"nap-end:{name}")
    return f"rested:{name}"


@workflow.defn(name="HeldStep")
class HeldStep:
    """One blocking activity whose lease (start_to_close) a test lets expire."""

    @workflow.run
    async def run(self, tag: str, start_to_close_s: float) -> str:
        return await workflow.execute_activity(
            slow_step, tag, start_to_close_timeout=timedelta(seconds=start_to_close_s)
        )


@workflow.defn(name="Naps")
class Naps:
    """``count`` activities in flight at once, each sleeping ``seconds``."""

    @workflow.run
    async def run(self, count: int, seconds: float, heartbeat_s: float) -> list[str]:
        naps = [
            workflow.execute_activity(
                nap,
                f"{index}",
                seconds,
                start_to_close_timeout=timedelta(seconds=60),
                heartbeat_timeout=timedelta(seconds=heartbeat_s),
            )
            for index in range(count)
        ]
        return list(await asyncio.gather(*naps))


@workflow.defn(name="TwoSteps")
class TwoSteps:
    @workflow.run
    async def run(self, tag: str) -> list[str]:
        first = await workflow.execute_activity(
            step, f"{tag}-1", start_to_close_timeout=timedelta(seconds=10)
        )
        second = await workflow.execute_activity(
            slow_step,
            f"{tag}-2",
            start_to_close_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
        )
        return [first, second]


def _mint_token(tag: str) -> str:
    token = f"{tag}:{uuid.uuid4().hex}"
    record(f"side_effect:{token}")
    return token


@workflow.defn(name="SideEffects")
class SideEffects:
    """A side effect and a version check before an activity a test kills the worker in."""

    @workflow.run
    async def run(self, tag: str) -> list[str]:
        token = workflow.side_effect(lambda: _mint_token(tag))
        patched = workflow.patched("tokens-v2")
        done = await workflow.execute_activity(
            slow_step,
            f"{tag}-1",
            start_to_close_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=50)),
        )
        again = workflow.side_effect(lambda: _mint_token(tag))
        return [token, str(patched), done, again]


@workflow.defn(name="Charge")
class Charge:
    @workflow.run
    async def run(self, amount: int) -> str:
        try:
            return await workflow.execute_activity(
                charge_card,
                amount,
                start_to_close_timeout=timedelta(seconds=1),
                idempotent=False,
            )
        except AmbiguousEffectError as exc:
            return f"ambiguous:{exc}"


@workflow.defn(name="Sleeper")
class Sleeper:
    @workflow.run
    async def run(self, seconds: float) -> str:
        await workflow.sleep(seconds)
        return "woke"


@workflow.defn(name="Collector")
class Collector:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.done = asyncio.Event()

    @workflow.signal
    async def add(self, item: str) -> None:
        if item == "done":
            self.done.set()
        else:
            self.items.append(item)

    @workflow.run
    async def run(self) -> list[str]:
        await self.done.wait()
        return self.items


@workflow.defn(name="Evolving")
class EvolvingV1:
    def __init__(self) -> None:
        self.go = asyncio.Event()

    @workflow.signal
    async def proceed(self) -> None:
        self.go.set()

    @workflow.run
    async def run(self) -> str:
        a = await workflow.execute_activity(step, "a", start_to_close_timeout=timedelta(seconds=5))
        await self.go.wait()
        b = await workflow.execute_activity(step, "b", start_to_close_timeout=timedelta(seconds=5))
        return f"{a}+{b}"


@workflow.defn(name="Evolving")
class EvolvingV2:
    """An incompatible change: a different first activity."""

    def __init__(self) -> None:
        self.go = asyncio.Event()

    @workflow.signal
    async def proceed(self) -> None:
        self.go.set()

    @workflow.run
    async def run(self) -> str:
        x = await workflow.execute_activity(
            slow_step, "x", start_to_close_timeout=timedelta(seconds=5)
        )
        await self.go.wait()
        return x


async def serve(client: Client, worker: Worker, cycles: int = 8) -> None:
    """Runs ``worker`` (``cycles`` claim-and-execute cycles) until SIGTERM, prints its
    report for the test's log and closes ``client``: the shared main of the test apps."""
    token = CancellationToken()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, token.cancel)
    config = WorkflowSupervisorConfig(cycles).with_backoff(
        timedelta(milliseconds=50), timedelta(seconds=1)
    )
    report = await WorkflowSupervisor(worker, config).run(token)
    print(report, flush=True)
    await client.close()


async def main() -> None:
    global RELEASED
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("task_queue")
    parser.add_argument("--release", action="store_true")
    parser.add_argument("--variant", default="v1", choices=["v1", "v2"])
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args()
    RELEASED = args.release
    evolving = EvolvingV1 if args.variant == "v1" else EvolvingV2
    client = await Client.connect(args.address, namespace=args.namespace)
    worker = Worker(
        client,
        task_queue=args.task_queue,
        workflows=[TwoSteps, Charge, Sleeper, Collector, SideEffects, HeldStep, Naps, evolving],
        activities=[step, slow_step, charge_card, nap],
        allow_definition_change=True,
    )
    # SIGUSR1 releases the blocked activities of a worker started without --release.
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _release.set)
    await serve(client, worker)


if __name__ == "__main__":
    asyncio.run(main())
