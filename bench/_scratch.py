"""A throwaway store for a store-level benchmark: a SQLite file in a temporary directory,
or a fresh database on the PostgreSQL cluster ``pg_url`` names, dropped afterwards."""

from __future__ import annotations

import tempfile
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from durable_rpc.store import Store, open_store


@asynccontextmanager
async def scratch_store(pg_url: str | None, label: str) -> AsyncIterator[Store]:
    """An open store on a fresh database; ``label`` names the temporary directory or
    database (``drpc-LABEL-*``, ``bench_LABEL_*``) so a leftover says whose it was."""
    if pg_url is None:
        with tempfile.TemporaryDirectory(prefix=f"drpc-{label}-") as tmp:
            async with _opened(f"sqlite:///{Path(tmp) / 'bench.db'}") as store:
                yield store
        return
    import psycopg

    name = f"bench_{label}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = urllib.parse.urlunsplit(urllib.parse.urlsplit(pg_url)._replace(path=f"/{name}"))
    try:
        async with _opened(url) as store:
            yield store
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def _opened(url: str) -> AsyncIterator[Store]:
    store = open_store(url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
