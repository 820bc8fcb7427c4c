"""Namespaces (the tenants) and API keys: the administration the security model rests on.

Keys are stored as a hash only (``durable_rpc.auth._keys``); a key's state (revoked,
expired) is judged by the database clock when the key is looked up, so revocation and
expiry hold on the next call through any replica.
"""

from __future__ import annotations

from durable_rpc.errors import (
    InvalidArgumentError,
    NamespaceAlreadyExistsError,
    NamespaceNotFoundError,
    NotFoundError,
)
from durable_rpc.store._admin_records import ApiKeyLookup, ApiKeyRecord, NamespaceRecord
from durable_rpc.store._migrations import DEFAULT_RETENTION_MS
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._ops_payloads import payload_usage
from durable_rpc.store._shared import require
from durable_rpc.store._tx import Row, Tx

_ROLES = ("client", "worker", "admin")
#: The largest payload quota an admin may set (a bound the databases' integers hold).
MAX_PAYLOAD_QUOTA_BYTES = 2**62
_DAY_MS = 86_400_000
#: Longest lifetime a key may be given: its expiry is answered as a Timestamp, which
#: ends at the year 9999, so a Duration's full range (10,000 years) would not fit.
MAX_KEY_LIFETIME_MS = 36_500 * _DAY_MS


def _namespace(tx: Tx, row: Row) -> NamespaceRecord:
    name = str(row["name"])
    quota, stored = payload_usage(tx, name)
    return NamespaceRecord(
        name=name,
        description=str(row["description"]),
        retention_ms=int(row["retention_ms"]),
        created_at_ms=int(row["created_at_ms"]),
        payload_quota_bytes=quota,
        payload_stored_bytes=stored,
    )


def api_key_record(row: Row) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=str(row["key_id"]),
        name=str(row["name"]),
        role=str(row["role"]),
        namespace=None if row["namespace"] is None else str(row["namespace"]),
        created_at_ms=int(row["created_at_ms"]),
        expires_at_ms=None if row["expires_at_ms"] is None else int(row["expires_at_ms"]),
        revoked_at_ms=None if row["revoked_at_ms"] is None else int(row["revoked_at_ms"]),
    )


def _check_retention(retention_ms: int) -> None:
    if retention_ms <= 0:
        raise InvalidArgumentError("retention must be positive")


def _check_payload_quota(quota_bytes: int) -> None:
    if not 0 < quota_bytes <= MAX_PAYLOAD_QUOTA_BYTES:
        raise InvalidArgumentError(
            f"payload quota must be positive and at most {MAX_PAYLOAD_QUOTA_BYTES} bytes"
        )


def _read_namespace(tx: Tx, name: str) -> NamespaceRecord:
    row = tx.one("SELECT * FROM namespaces WHERE name = ?", (name,))
    if row is None:
        raise NamespaceNotFoundError(f"namespace {name!r} does not exist")
    return _namespace(tx, row)


class _AdminOps(_SqlOpsBase):
    """Namespaces and API keys."""

    async def create_namespace(
        self, name: str, description: str, retention_ms: int | None
    ) -> NamespaceRecord:
        require(name, "namespace")
        retention = DEFAULT_RETENTION_MS if retention_ms is None else retention_ms
        _check_retention(retention)

        def op(tx: Tx) -> NamespaceRecord:
            created = tx.run(
                "INSERT INTO namespaces (name, created_at_ms, description, retention_ms) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (name) DO NOTHING",
                (name, tx.now_ms(), description, retention),
            )
            if not created:
                raise NamespaceAlreadyExistsError(f"namespace {name!r} already exists")
            return _read_namespace(tx, name)

        return await self._write(op)

    async def describe_namespace(self, name: str) -> NamespaceRecord:
        return await self._read(lambda tx: _read_namespace(tx, name))

    async def list_namespaces(self) -> list[NamespaceRecord]:
        def op(tx: Tx) -> list[NamespaceRecord]:
            return [_namespace(tx, r) for r in tx.all("SELECT * FROM namespaces ORDER BY name")]

        return await self._read(op)

    async def update_namespace(
        self,
        name: str,
        description: str | None,
        retention_ms: int | None,
        payload_quota_bytes: int | None = None,
    ) -> NamespaceRecord:
        if retention_ms is not None:
            _check_retention(retention_ms)
        if payload_quota_bytes is not None:
            _check_payload_quota(payload_quota_bytes)

        def op(tx: Tx) -> NamespaceRecord:
            current = _read_namespace(tx, name)
            # An unset quota stays unset: the namespace follows the default.
            tx.run(
                "UPDATE namespaces SET description = ?, retention_ms = ?, "
                "payload_quota_bytes = COALESCE(?, payload_quota_bytes) WHERE name = ?",
                (
                    current.description if description is None else description,
                    current.retention_ms if retention_ms is None else retention_ms,
                    payload_quota_bytes,
                    name,
                ),
            )
            return _read_namespace(tx, name)

        return await self._write(op)

    async def create_api_key(
        self,
        key_id: str,
        secret_hash: str,
        role: str,
        namespace: str | None,
        name: str,
        expires_in_ms: int | None,
    ) -> ApiKeyRecord:
        """Record a key made by ``durable_rpc.auth._keys.new_key`` (the hash only).
        ``namespace`` None: every namespace (an admin key only)."""
        require(key_id, "key_id")
        require(secret_hash, "secret_hash")
        if role not in _ROLES:
            raise InvalidArgumentError(f"role must be one of {', '.join(_ROLES)}, not {role!r}")
        if namespace is None and role != "admin":
            raise InvalidArgumentError("only an admin key can be for every namespace")
        if expires_in_ms is not None and expires_in_ms <= 0:
            raise InvalidArgumentError("expires_in must be positive")
        if expires_in_ms is not None and expires_in_ms > MAX_KEY_LIFETIME_MS:
            raise InvalidArgumentError(
                f"expires_in must be at most {MAX_KEY_LIFETIME_MS // _DAY_MS:,} days "
                "(unset: the key never expires)"
            )

        def op(tx: Tx) -> ApiKeyRecord:
            if namespace is not None:
                _read_namespace(tx, namespace)
            now = tx.now_ms()
            tx.run(
                "INSERT INTO api_keys (key_id, secret_hash, role, namespace, name, "
                "created_at_ms, expires_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    key_id,
                    secret_hash,
                    role,
                    namespace,
                    name,
                    now,
                    None if expires_in_ms is None else now + expires_in_ms,
                ),
            )
            tx.notes.keys.append(key_id)
            return api_key_record(_key_row(tx, key_id))

        return await self._write(op)

    async def list_api_keys(self, namespace: str | None) -> list[ApiKeyRecord]:
        """Every key (``namespace`` None) or the keys of one namespace, oldest first."""

        def op(tx: Tx) -> list[ApiKeyRecord]:
            columns = "key_id, role, namespace, name, created_at_ms, expires_at_ms, revoked_at_ms"
            if namespace is None:
                rows = tx.all(f"SELECT {columns} FROM api_keys ORDER BY created_at_ms, key_id")
            else:
                rows = tx.all(
                    f"SELECT {columns} FROM api_keys WHERE namespace = ? "
                    "ORDER BY created_at_ms, key_id",
                    (namespace,),
                )
            return [api_key_record(r) for r in rows]

        return await self._read(op)

    async def revoke_api_key(self, key_id: str, namespace: str | None) -> ApiKeyRecord:
        """Revoke the key (idempotent: the first revocation's time stays). ``namespace``:
        the key must belong to it (None: a key for every namespace)."""

        def op(tx: Tx) -> ApiKeyRecord:
            row = tx.one("SELECT namespace FROM api_keys WHERE key_id = ?", (key_id,))
            if row is None or row["namespace"] != namespace:
                raise NotFoundError(f"no key {key_id!r} in this scope")
            tx.run(
                "UPDATE api_keys SET revoked_at_ms = ? WHERE key_id = ? AND revoked_at_ms IS NULL",
                (tx.now_ms(), key_id),
            )
            tx.notes.keys.append(key_id)
            return api_key_record(_key_row(tx, key_id))

        return await self._write(op)

    async def lookup_api_key(self, key_id: str) -> ApiKeyLookup | None:
        """The key and its stored hash, judged by the database clock (None: no such key)."""

        return await self._read_latest(lambda tx: read_api_key(tx, key_id))


def read_api_key(tx: Tx, key_id: str) -> ApiKeyLookup | None:
    row = tx.one("SELECT * FROM api_keys WHERE key_id = ?", (key_id,))
    if row is None:
        return None
    return ApiKeyLookup(api_key_record(row), str(row["secret_hash"]), tx.now_ms())


def _key_row(tx: Tx, key_id: str) -> Row:
    row = tx.one("SELECT * FROM api_keys WHERE key_id = ?", (key_id,))
    assert row is not None, "the key was written in this transaction"
    return row
