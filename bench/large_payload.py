"""Round-trips one large payload through a real server process: upload in chunks by the
SDK's payload channel (SHA-256 computed, the server verifying the stored chunks), a
second upload of the same bytes (deduplicated: one call), then a verified download; and,
with ``--workflow``, the same payload through a workflow (input and result) on a worker
in this process. Prints the time of each step and the peak RSS (VmHWM) of the server and
of this client process: the server's stays bounded (chunks, never the whole payload),
the client holds the payload it has (and its copies).

    python bench/large_payload.py                      # 1 GiB, SQLite file in a temp dir
    python bench/large_payload.py --mib 256 --workflow
    python bench/large_payload.py --pg-url postgresql://postgres@127.0.0.1:51849/postgres
    python bench/large_payload.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import uuid
from datetime import timedelta
from typing import Any

from _checkout import ROOT, child_env
from _proc import peak_rss_mib

from durable_rpc import Client, Worker, converter
from durable_rpc.client._payload_channel import PayloadChannel

# The workflow of --workflow is the large-payload tests' Echo.
sys.path.insert(0, str(ROOT))

MIB = 2**20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_database(pg_url: str) -> str:
    import psycopg

    name = f"bench_payload_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    parts = urllib.parse.urlsplit(pg_url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))


def _drop_database(pg_url: str, db_url: str) -> None:
    import psycopg

    name = urllib.parse.urlsplit(db_url).path.lstrip("/")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


async def _wait_ready(address: str) -> Client:
    deadline = time.monotonic() + 60
    while True:
        try:
            return await Client.connect(address, timeout=2, max_external_payload_bytes=8 << 30)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def start_server(db_url: str) -> tuple[subprocess.Popen[bytes], str]:
    address = f"127.0.0.1:{_free_port()}"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durable_rpc.cli",
            "server",
            "--db",
            db_url,
            "--listen",
            address,
            # The workflow round trip moves the payload under one workflow-task lease.
            "--workflow-task-lease",
            "600",
            "--log-level",
            "WARNING",
        ],
        env=child_env(),
    )
    return server, address


async def run(
    mib: int, db_url: str, workflow: bool, server: subprocess.Popen[bytes], address: str
) -> dict[str, Any]:
    figures: dict[str, Any] = {"mib": mib, "store": db_url.split(":", 1)[0]}
    try:
        client = await _wait_ready(address)
        channel = client.channel
        assert isinstance(channel, PayloadChannel)
        frame = converter.encode_args([os.urandom(mib * MIB)])
        figures["server_rss_before_mib"] = round(peak_rss_mib(server.pid), 1)
        began = time.monotonic()
        ref = await channel.upload("default", frame)
        figures["upload_s"] = round(time.monotonic() - began, 2)
        began = time.monotonic()
        await channel.upload("default", frame)
        figures["dedup_upload_s"] = round(time.monotonic() - began, 3)
        began = time.monotonic()
        back = await channel.download("default", ref.sha256, ref.size)
        figures["download_s"] = round(time.monotonic() - began, 2)
        assert back == frame
        del back
        if workflow:
            from tests.e2e.payload_app import Echo

            data = converter.decode_args(frame, [bytes])[0]
            del frame
            began = time.monotonic()
            # Replaying a task whose history holds the payload decodes it whole: longer
            # than the default 10 s deadline of a workflow task at this size.
            async with Worker(
                client,
                task_queue="bench-q",
                workflows=[Echo],
                activities=[],
                workflow_task_deadline=timedelta(minutes=10),
            ):
                handle = await client.start_workflow(Echo.run, data, id="big", task_queue="bench-q")
                assert await handle.result(timeout=3600) == data
            figures["workflow_round_trip_s"] = round(time.monotonic() - began, 2)
        figures["server_peak_rss_mib"] = round(peak_rss_mib(server.pid), 1)
        figures["client_peak_rss_mib"] = round(peak_rss_mib(os.getpid()), 1)
        await client.close()
    finally:
        server.terminate()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="payload size in MiB")
    parser.add_argument("--pg-url", help="a PostgreSQL server (a fresh database is made)")
    parser.add_argument("--workflow", action="store_true", help="also through a workflow")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drpc-payload-") as tmp:
        db_url = _pg_database(args.pg_url) if args.pg_url else f"sqlite:///{tmp}/bench.db"
        server, address = start_server(db_url)
        try:
            figures = asyncio.run(run(args.mib, db_url, args.workflow, server, address))
        finally:
            server.wait(30)
            if args.pg_url:
                _drop_database(args.pg_url, db_url)
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
