"""Stores and server replicas for the end-to-end benchmark.

``database(...)`` yields the store URL: a SQLite file, or a fresh database on PostgreSQL
(``--pg-url``, else a throwaway cluster started with scripts/pg_cluster.sh, fsync on, so
every acknowledged write is durable as with SQLite's synchronous=FULL). ``server_commands``
returns one ``durable-rpc server`` command line per replica, all on that URL.
Clients and workers spread over the replicas with gRPC's round_robin policy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc

from durable_rpc import Client
from durable_rpc.client._channel import KeyedChannel

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _cluster(pg_url: str | None) -> Iterator[str]:
    if pg_url:
        yield pg_url
        return
    parent = Path(tempfile.mkdtemp(prefix="durable-bench-pg-", dir="/tmp"))
    os.chmod(parent, 0o755)  # the postgres user must reach it
    directory = parent / "cluster"
    script = ROOT / "scripts" / "pg_cluster.sh"
    try:
        out = subprocess.run(
            ["bash", str(script), "start", str(directory)],
            check=True,
            capture_output=True,
            text=True,
        )
        yield out.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(script), "stop", str(directory)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


@contextlib.contextmanager
def database(store: str, pg_url: str | None, tmp: str) -> Iterator[str]:
    """The store URL for one benchmark run (a fresh database)."""
    if store == "sqlite":
        yield f"sqlite:///{tmp}/bench.db"
        return
    import psycopg

    with _cluster(pg_url) as base:
        name = f"bench_{uuid.uuid4().hex[:12]}"
        from durable_rpc.store._pg_url import parse_url

        admin = parse_url(base)[0]  # without the store's own parameters (hot_path=...)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        parts = urllib.parse.urlsplit(base)
        try:
            yield urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
        finally:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def server_commands(db_url: str, replicas: int) -> list[tuple[list[str], str]]:
    """(command line, address) of each server replica."""
    commands = []
    for _ in range(replicas):
        address = f"127.0.0.1:{free_port()}"
        command = [sys.executable, "-m", "durable_rpc.cli", "server", "--log-level", "WARNING"]
        commands.append(([*command, "--db", db_url, "--listen", address], address))
    return commands


def target(addresses: list[str]) -> str:
    return addresses[0] if len(addresses) == 1 else "ipv4:" + ",".join(addresses)


async def connect(address: str) -> Client:
    """A client whose calls rotate over every replica of ``address`` (round_robin)."""
    channel = grpc.aio.insecure_channel(
        address,
        options=[
            ("grpc.lb_policy_name", "round_robin"),
            ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ],
    )
    await channel.channel_ready()
    # With --auth (e2e_bench), every call carries the key as the SDK's own client does.
    key = os.environ.get("DURABLE_RPC_API_KEY")
    return Client(KeyedChannel(channel, key) if key else channel)
