"""Namespaces and API keys in the store: settings, the hash-only key table, and the
state of a key judged by the database clock."""

from __future__ import annotations

import pytest

from durable_rpc.auth import new_key, secret_matches
from durable_rpc.errors import (
    InvalidArgumentError,
    NamespaceAlreadyExistsError,
    NamespaceNotFoundError,
    NotFoundError,
)
from durable_rpc.store import Store
from tests.store.conftest import Backend
from tests.store.helpers import wait_db_time


async def test_namespaces_are_created_described_listed_and_updated(store: Store) -> None:
    created = await store.create_namespace("team-a", "payments", 7 * 86_400_000)
    assert (created.name, created.description, created.retention_ms) == (
        "team-a",
        "payments",
        7 * 86_400_000,
    )
    with pytest.raises(NamespaceAlreadyExistsError):
        await store.create_namespace("team-a", "again", None)
    assert (await store.describe_namespace("team-a")) == created
    assert [n.name for n in await store.list_namespaces()] == ["default", "team-a"]
    updated = await store.update_namespace("team-a", None, 86_400_000)
    assert (updated.description, updated.retention_ms) == ("payments", 86_400_000)
    updated = await store.update_namespace("team-a", "cards", None)
    assert (updated.description, updated.retention_ms) == ("cards", 86_400_000)
    with pytest.raises(NamespaceNotFoundError):
        await store.update_namespace("nope", "x", None)
    with pytest.raises(InvalidArgumentError):
        await store.create_namespace("team-b", "", 0)


async def test_a_key_is_stored_as_its_hash_and_judged_by_the_database_clock(
    store: Store,
) -> None:
    made = new_key()
    record = await store.create_api_key(
        made.key_id, made.secret_hash, "client", "default", "ci", 50
    )
    assert record.namespace == "default"
    assert record.expires_at_ms == record.created_at_ms + 50
    found = await store.lookup_api_key(made.key_id)
    assert found is not None
    assert found.secret_hash == made.secret_hash != made.secret
    assert secret_matches(made.secret, found.secret_hash)
    assert found.now_ms < record.created_at_ms + 50 or found.now_ms >= record.created_at_ms
    await wait_db_time(store, record.created_at_ms + 50)
    later = await store.lookup_api_key(made.key_id)
    assert later is not None and later.key.expires_at_ms is not None
    assert later.key.expires_at_ms <= later.now_ms  # expired, by the database's clock
    assert await store.lookup_api_key("0" * 16) is None


async def test_keys_are_listed_by_namespace_and_revoked_once(store: Store) -> None:
    await store.create_namespace("team-a", "", None)
    client = new_key()
    admin = new_key()
    await store.create_api_key(client.key_id, client.secret_hash, "client", "team-a", "", None)
    await store.create_api_key(admin.key_id, admin.secret_hash, "admin", None, "root", None)
    assert [k.key_id for k in await store.list_api_keys("team-a")] == [client.key_id]
    assert {k.key_id for k in await store.list_api_keys(None)} == {client.key_id, admin.key_id}
    with pytest.raises(NotFoundError):
        await store.revoke_api_key(client.key_id, "default")  # not that namespace's key
    revoked = await store.revoke_api_key(client.key_id, "team-a")
    assert revoked.revoked_at_ms is not None
    again = await store.revoke_api_key(client.key_id, "team-a")
    assert again.revoked_at_ms == revoked.revoked_at_ms
    with pytest.raises(InvalidArgumentError, match="only an admin key"):
        await store.create_api_key("1" * 16, "h", "worker", None, "", None)
    with pytest.raises(InvalidArgumentError, match="role"):
        await store.create_api_key("1" * 16, "h", "root", "team-a", "", None)
    with pytest.raises(NamespaceNotFoundError):
        await store.create_api_key("1" * 16, "h", "client", "nope", "", None)


async def test_keys_survive_a_restart(durable_backend: Backend) -> None:
    made = new_key()
    async with durable_backend.make() as store:
        await store.create_api_key(made.key_id, made.secret_hash, "worker", "default", "", None)
    async with durable_backend.make() as store:
        found = await store.lookup_api_key(made.key_id)
        assert found is not None and found.key.role == "worker"


async def test_a_key_id_found_in_no_row_is_found_once_its_key_is_made(store: Store) -> None:
    """A store remembers key ids it found no key for (so a caller repeating one costs no
    read) only until keys change."""
    made = new_key()
    assert await store.lookup_api_key(made.key_id) is None
    assert await store.lookup_api_key(made.key_id) is None
    await store.create_api_key(made.key_id, made.secret_hash, "client", "default", "", None)
    found = await store.lookup_api_key(made.key_id)
    assert found is not None and found.key.key_id == made.key_id
