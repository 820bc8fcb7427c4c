"""Server secrets kept in the store, so every replica on one database holds the same one
(a page token one replica signs, another verifies). Each is made once, at first use, by
whichever replica asks first; it never leaves the server."""

from __future__ import annotations

import secrets

from durable_rpc.store._dialects import Dialect
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._shared import require
from durable_rpc.store._tx import Tx

_SECRET_BYTES = 32


def secret_tables(d: Dialect) -> tuple[str, ...]:
    """The server secrets' table (same shape on both backends)."""
    return (f"CREATE TABLE server_secrets (name TEXT PRIMARY KEY, secret {d.blob} NOT NULL)",)


class _SecretOps(_SqlOpsBase):
    async def signing_secret(self, name: str) -> bytes:
        """The server secret ``name`` (made at first use, the same on every replica)."""
        require(name, "name")
        made = secrets.token_bytes(_SECRET_BYTES)

        def op(tx: Tx) -> bytes:
            # Replicas asking at once: the first insert wins, every one reads that.
            tx.run(
                "INSERT INTO server_secrets (name, secret) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (name, made),
            )
            row = tx.one("SELECT secret FROM server_secrets WHERE name = ?", (name,))
            assert row is not None
            return bytes(row["secret"])

        return await self._write(op)
