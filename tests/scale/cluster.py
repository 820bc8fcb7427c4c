"""The PostgreSQL cluster the tests use, and a fresh database per test.

``DURABLE_RPC_TEST_PG_URL`` names a running cluster (scripts/test.sh starts one with
scripts/pg_cluster.sh and exports it, with ``DURABLE_RPC_TEST_PG_DIR`` so tests can stop
and restart that server). Without it, :func:`cluster` starts a throwaway cluster itself
when the PostgreSQL binaries are installed (and removes it at exit). Under ``CI=true`` a
missing PostgreSQL is a failure, never a skip.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import subprocess
import tempfile
import urllib.parse
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pg_cluster.sh"
URL_ENV = "DURABLE_RPC_TEST_PG_URL"
DIR_ENV = "DURABLE_RPC_TEST_PG_DIR"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def binaries_installed() -> bool:
    return bool(glob.glob("/usr/lib/postgresql/*/bin/initdb") or shutil.which("initdb"))


@dataclass
class Cluster:
    #: URL of the cluster's main database (created by pg_cluster.sh).
    url: str
    #: The pg_cluster.sh directory when we may stop/start the server (else None).
    dir: Path | None

    def database_url(self, name: str) -> str:
        parts = urllib.parse.urlsplit(self.url)
        return urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def drop_database(self, url: str) -> None:
        name = urllib.parse.urlsplit(url).path.lstrip("/")
        try:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.OperationalError:
            pass  # the server is down (a test stopped it); the cluster is throwaway anyway

    def _script(self, command: str) -> None:
        if self.dir is None:
            pytest.skip(f"the cluster at {self.url} is not ours to {command} (no {DIR_ENV})")
        subprocess.run(["bash", str(SCRIPT), command, str(self.dir)], check=True, timeout=120)

    def server_stop(self) -> None:
        self._script("server-stop")

    def server_start(self) -> None:
        self._script("server-start")


_cluster: Cluster | None = None


def _start_own() -> Cluster:
    own, stop = start_throwaway()
    atexit.register(stop)
    return own


def start_throwaway() -> tuple[Cluster, Callable[[], None]]:
    """A new cluster of this test's own (it may stop and start it), and the function
    that removes it. Never the shared one of DURABLE_RPC_TEST_PG_URL."""
    # Under /tmp (not pytest's 0700 tmp dirs): the postgres user must reach the directory.
    parent = Path(tempfile.mkdtemp(prefix="durable-rpc-pg-", dir="/tmp"))
    os.chmod(parent, 0o755)
    directory = parent / "cluster"
    env = {**os.environ, "PG_CLUSTER_FSYNC": "off"}
    done = subprocess.run(
        ["bash", str(SCRIPT), "start", str(directory)],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if done.returncode != 0:
        shutil.rmtree(parent, ignore_errors=True)
        raise RuntimeError(f"cannot start PostgreSQL: {done.stderr.strip()}")

    def stop() -> None:
        subprocess.run(["bash", str(SCRIPT), "stop", str(directory)], check=False, timeout=120)
        shutil.rmtree(parent, ignore_errors=True)

    return Cluster(done.stdout.strip().splitlines()[-1], directory), stop


def cluster() -> Cluster | None:
    """The test cluster (started on first use when possible), or None."""
    global _cluster
    if _cluster is None:
        url = os.environ.get(URL_ENV)
        if url:
            directory = os.environ.get(DIR_ENV)
            _cluster = Cluster(url, Path(directory) if directory else None)
        elif binaries_installed():
            _cluster = _start_own()
    return _cluster


def require_cluster() -> Cluster:
    """The test cluster; skips without PostgreSQL, except in CI where that fails."""
    try:
        found = cluster()
    except RuntimeError as exc:
        if in_ci():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    if found is None:
        message = f"PostgreSQL is not available (set {URL_ENV} or install the server)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return found


def require_variant_cluster() -> Cluster:
    """The test cluster for the PostgreSQL variant of a test that also runs on SQLite:
    skipped without ``DURABLE_RPC_TEST_PG_URL`` (no cluster is started for it), except in
    CI, where PostgreSQL must be there."""
    if not available():
        pytest.skip(f"set {URL_ENV} to run the PostgreSQL variant")
    return require_cluster()


def available() -> bool:
    """Whether the PostgreSQL half of the store suite should run."""
    return bool(os.environ.get(URL_ENV)) or in_ci()
