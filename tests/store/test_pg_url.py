"""The PostgreSQL store URL: the store's own parameters are taken out of what libpq gets,
bad values are refused with INVALID_ARGUMENT, and no error shows the password."""

from __future__ import annotations

import pytest

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._pg_url import hot_path_enabled, parse_url, redact

SECRET = "s3cret-pw"
BASE = f"postgresql://app:{SECRET}@db.example:5433/durable"


def test_own_parameters_are_taken_out_and_libpq_keeps_the_rest() -> None:
    conninfo, pool_size, acquire_timeout = parse_url(
        f"{BASE}?pool_size=3&sslmode=require&acquire_timeout=1.5&hot_path=off"
    )
    assert (pool_size, acquire_timeout) == (3, 1.5)
    assert conninfo == f"{BASE}?sslmode=require"


def test_defaults_apply_when_the_url_names_none() -> None:
    assert parse_url(BASE) == (BASE, 10, 5.0)
    assert hot_path_enabled(BASE)


@pytest.mark.parametrize(
    "query",
    ["pool_size=ten", "pool_size=0", "acquire_timeout=-1", "acquire_timeout=soon"],
)
def test_a_bad_store_parameter_is_refused_without_showing_the_password(query: str) -> None:
    with pytest.raises(InvalidArgumentError) as refused:
        parse_url(f"{BASE}?{query}")
    assert SECRET not in str(refused.value)
    assert query.split("=")[0] in str(refused.value)


def test_hot_path_is_on_or_off_and_nothing_else() -> None:
    assert not hot_path_enabled(f"{BASE}?hot_path=off")
    with pytest.raises(InvalidArgumentError, match="hot_path must be on or off"):
        hot_path_enabled(f"{BASE}?hot_path=maybe")


def test_redact_hides_the_password_only() -> None:
    assert redact(BASE) == "postgresql://app:***@db.example:5433/durable"
    assert redact("postgresql://app@db.example/durable") == "postgresql://app@db.example/durable"


def test_libpq_parameters_reach_libpq_as_written() -> None:
    """A space in ``options`` stays a space (``%20``): libpq reads ``+`` literally."""
    conninfo, _, _ = parse_url(f"{BASE}?options=-c%20statement_timeout%3D5s&pool_size=2")
    assert conninfo == f"{BASE}?options=-c%20statement_timeout%3D5s"
