"""Server memory while concurrent GetWorkflowHistory calls read one large history.

Starts a server (SQLite file), gives one run a large history (``--signals`` signals of
``--signal-bytes`` each; no worker, so nothing else happens), resets the server's peak
RSS (``/proc/<pid>/clear_refs``), then makes ``--calls`` concurrent whole-history reads
(each following the pages) and reports the server's RSS before and its peak during
them. Before pages were bounded in bytes, 8 calls on 17 x 4 MB took the server from
95 MB to 620 MB.

    python bench/history_memory.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from _checkout import child_env
from _proc import peak_rss_mib

from durable_rpc import Client
from durable_rpc.client import WorkflowHandle


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _start(address: str, deadline_s: float = 30.0) -> tuple[Client, WorkflowHandle]:
    """The client and the run, once the server answers."""
    client = await Client.connect(address)
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            handle = await client.start_workflow("Big", id="big", task_queue="nobody-polls")
            return client, handle
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def _measure(args: argparse.Namespace, pid: int, address: str) -> dict[str, float | int]:
    client, handle = await _start(address)
    for i in range(args.signals):
        await handle.signal("s", "x" * args.signal_bytes + str(i))
    events = len(await handle.history())
    await asyncio.sleep(0.5)
    rss_before = _rss_mib(pid)
    # Peak RSS from now on (Linux: writing 5 to clear_refs resets VmHWM).
    with open(f"/proc/{pid}/clear_refs", "w") as refs:  # noqa: ASYNC230 (procfs: instant)
        refs.write("5")
    started = time.monotonic()
    readers = [await Client.connect(address) for _ in range(args.calls)]
    read = await asyncio.gather(*(r.get_handle("big").history() for r in readers))
    seconds = time.monotonic() - started
    assert all(len(r) == events for r in read)
    peak = peak_rss_mib(pid)
    for reader in readers:
        await reader.close()
    await client.close()
    return {
        "signals": args.signals,
        "signal_bytes": args.signal_bytes,
        "history_events": events,
        "calls": args.calls,
        "server_rss_before_mib": round(rss_before, 1),
        "server_peak_rss_during_mib": round(peak, 1),
        "seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--signals", type=int, default=12)
    parser.add_argument("--signal-bytes", type=int, default=4_000_000)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        address = f"127.0.0.1:{_free_port()}"
        log = (Path(tmp) / "server.log").open("wb")
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durable_rpc.cli",
                "server",
                "--db",
                f"sqlite:///{tmp}/bench.db",
                "--listen",
                address,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(),
        )
        try:
            result = asyncio.run(_measure(args, server.pid, address))
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
