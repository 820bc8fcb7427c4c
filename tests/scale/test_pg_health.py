"""grpc.health.v1 follows the PostgreSQL store: a replica says NOT_SERVING while its
database server is down and SERVING once it is back. The test stops and starts a
throwaway cluster of its own, never the shared one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_health_store import NOT_SERVING, SERVING, await_status
from tests.scale.cluster import Cluster, binaries_installed, in_ci, start_throwaway
from tests.scale.procs import PgServerProcess


@pytest.fixture
def own_cluster() -> Iterator[Cluster]:
    if not binaries_installed():
        message = "PostgreSQL binaries are not installed"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    cluster, remove = start_throwaway()
    try:
        yield cluster
    finally:
        remove()


def test_health_is_not_serving_while_postgres_is_down(own_cluster: Cluster, tmp_path: Path) -> None:
    replica = PgServerProcess(own_cluster.url, tmp_path / "replica.log")
    replica.start()
    try:
        await_status(replica.address, SERVING)
        own_cluster.server_stop()
        try:
            await_status(replica.address, NOT_SERVING)
        finally:
            own_cluster.server_start()
        await_status(replica.address, SERVING)
    finally:
        replica.stop()
