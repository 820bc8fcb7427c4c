"""A key check costs the same whether the key id exists or not: an unknown id and a wrong
secret for a real one do the same work (one hash, compared in constant time; no database
read once seen), so the time an answer takes tells a caller nothing of which ids exist."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from durable_rpc.auth import _keys, new_key
from durable_rpc.errors import UnauthenticatedError
from durable_rpc.server._auth import Authenticator
from durable_rpc.store import open_store


async def test_an_unknown_key_id_is_checked_like_a_wrong_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'durable.db'}")
    await store.open()
    try:
        made = new_key()
        await store.create_api_key(made.key_id, made.secret_hash, "client", "default", "", None)
        counts = {"hashes": 0, "reads": 0}
        hash_secret = _keys.hash_secret
        read_latest = store._read_latest  # type: ignore[attr-defined]

        def counted_hash(secret: str) -> str:
            counts["hashes"] += 1
            return hash_secret(secret)

        def counted_read(fn: Callable[[Any], Any]) -> Awaitable[Any]:
            counts["reads"] += 1
            return read_latest(fn)  # type: ignore[no-any-return]

        monkeypatch.setattr(_keys, "hash_secret", counted_hash)
        monkeypatch.setattr(store, "_read_latest", counted_read)
        authenticator = Authenticator(store)

        async def work_of_refusing(secret: str) -> dict[str, int]:
            """What three refusals of ``secret`` cost, once it was seen."""
            metadata = [("authorization", f"Bearer {secret}")]
            for attempt in range(4):
                if attempt == 1:
                    counts.update(hashes=0, reads=0)
                with pytest.raises(UnauthenticatedError, match="not valid"):
                    await authenticator.principal(metadata)
            return dict(counts)

        last = made.secret[-1]
        wrong_secret = made.secret[:-1] + ("A" if last != "A" else "B")
        unknown_id = new_key().secret
        assert await work_of_refusing(unknown_id) == {"hashes": 3, "reads": 0}
        assert await work_of_refusing(wrong_secret) == {"hashes": 3, "reads": 0}
    finally:
        await store.close()
