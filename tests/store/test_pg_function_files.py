"""PostgreSQL's hot-path functions are kept as whole texts, one file per version
(``store/pg_functions/<function>.v<migration>.sql``): every file belongs to the migration
its name says, creates the function its name says and says what its version changes,
and a migrated database runs each function's last file."""

from __future__ import annotations

from importlib.resources import files

import psycopg
import pytest

from durable_rpc.store import open_store
from durable_rpc.store._migrations import MIGRATIONS
from durable_rpc.store._pg_hot_sql import function_file, statement_of
from tests.scale import cluster as pg

FUNCTION_FILES = files("durable_rpc.store").joinpath("pg_functions")

#: (function, migration) of every function text a migration declares, in order.
DECLARED = [(name, m.version) for m in MIGRATIONS for name in m.postgres_functions]


def _text(name: str, version: int) -> str:
    return FUNCTION_FILES.joinpath(function_file(name, version)).read_text(encoding="utf-8")


def _body(statement: str) -> str:
    """The PL/pgSQL body, as PostgreSQL keeps it (``pg_proc.prosrc``)."""
    dollar_quoted = statement.split("$fn$")
    assert len(dollar_quoted) == 3, statement[:80]
    return dollar_quoted[1]


def test_every_file_is_declared_by_one_migration_and_every_declared_one_exists() -> None:
    on_disk = sorted(f.name for f in FUNCTION_FILES.iterdir())
    assert on_disk == sorted(function_file(name, version) for name, version in DECLARED)


@pytest.mark.parametrize(("name", "version"), DECLARED, ids=str)
def test_a_file_creates_the_function_its_name_says_after_its_notes(name: str, version: int) -> None:
    first = min(v for n, v in DECLARED if n == name)
    create = "CREATE FUNCTION" if version == first else "CREATE OR REPLACE FUNCTION"
    text = _text(name, version)
    statement = statement_of(text)
    assert statement.startswith(f"{create} {name}(")
    assert statement.endswith(" $fn$")
    notes = text.removesuffix(statement + "\n")
    assert notes != text
    assert notes and all(line.startswith("-- ") for line in notes.splitlines())


@pytest.mark.skipif(not pg.available(), reason="needs PostgreSQL")
async def test_a_migrated_database_runs_each_function_s_last_file() -> None:
    last = {name: version for name, version in DECLARED}  # DECLARED is in version order
    cluster = pg.require_cluster()
    url = cluster.create_database()
    try:
        store = open_store(url)
        await store.open()
        await store.close()
        with psycopg.connect(url) as conn:
            installed: dict[str, str] = dict(
                conn.execute(
                    "SELECT proname, prosrc FROM pg_proc WHERE proname = ANY (%s)",
                    (list(last),),
                ).fetchall()
            )
    finally:
        cluster.drop_database(url)
    assert installed == {
        name: _body(statement_of(_text(name, version))) for name, version in last.items()
    }


@pytest.mark.skipif(not pg.available(), reason="needs PostgreSQL")
async def test_the_hot_functions_plan_by_key_whatever_the_tables_held_at_first_call() -> None:
    """Their generic plans are made on a connection's first call, often on a new (empty)
    database: a plan that scans a table whole would keep doing so as the table grows."""
    cluster = pg.require_cluster()
    url = cluster.create_database()
    try:
        store = open_store(url)
        await store.open()
        await store.close()
        with psycopg.connect(url) as conn:
            settings = dict(
                conn.execute(
                    "SELECT proname, proconfig FROM pg_proc WHERE proname = ANY (%s)",
                    (["drpc_record_decision", "drpc_start_workflow"],),
                ).fetchall()
            )
    finally:
        cluster.drop_database(url)
    assert set(settings) == {"drpc_record_decision", "drpc_start_workflow"}
    for config in settings.values():
        assert "enable_seqscan=off" in config
        assert "plan_cache_mode=force_generic_plan" in config
