"""Shared test configuration."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scale import cluster as pg

ROOT = Path(__file__).resolve().parent.parent
# The interop files (golden frames and schemas) are shared with the Durable Workflow SDKs.
# When a copy of the interop files sits beside the checkout, the tests read it; otherwise
# they read tests/fixtures/interop, which tests/codec/test_golden.py checks is byte for
# byte that copy whenever both exist. DURABLE_RPC_INTEROP_DIR names another directory.
SHARED_INTEROP = ROOT.parent / "shared" / "interop"
VENDORED_INTEROP = ROOT / "tests" / "fixtures" / "interop"
INTEROP = Path(
    os.environ.get(
        "DURABLE_RPC_INTEROP_DIR",
        SHARED_INTEROP
        if (SHARED_INTEROP / "golden-avro-value-v1.json").is_file()
        else VENDORED_INTEROP,
    )
)


@pytest.fixture(scope="session")
def interop_dir() -> Path:
    if not (INTEROP / "golden-avro-value-v1.json").is_file():
        pytest.fail(f"interop golden files not found in {INTEROP}; set DURABLE_RPC_INTEROP_DIR")
    return INTEROP


#: The server backends of a test marked ``also_on_postgres``.
SERVER_BACKENDS = ("sqlite", "postgres")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "also_on_postgres: run the test's server on SQLite and on PostgreSQL "
        "(ids sqlite/postgres; see server_db_url)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (
        metafunc.definition.get_closest_marker("also_on_postgres")
        and "server_db_url" in metafunc.fixturenames
    ):
        metafunc.parametrize("server_db_url", SERVER_BACKENDS, indirect=True)


@pytest.fixture
def server_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The database of the test's server process (tests/e2e/conftest.py ``server``,
    tests/security/conftest.py ``auth_server``): a SQLite file in tmp_path, or for the
    ``postgres`` variant of a test marked ``also_on_postgres`` a new database on the test
    cluster, dropped after the test."""
    backend = getattr(request, "param", "sqlite")
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'durable.db'}"
        return
    cluster = pg.require_variant_cluster()
    url = cluster.create_database()
    yield url
    cluster.drop_database(url)
