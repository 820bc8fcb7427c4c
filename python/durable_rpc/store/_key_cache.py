"""The API keys a store has read, kept until they may have changed.

With authentication on every call looks its key up; a read per call cost ~11% of
throughput on SQLite. Each backend says when to ``forget`` (SQLite: its own key writes
and other processes' commits; PostgreSQL: key NOTIFYs and a lost LISTEN connection);
this class only keeps the keys and refuses to cache a read that a ``forget`` overtook.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from durable_rpc.store._api import ApiKeyLookup, ApiKeyRecord

#: Past this many cached keys the cache starts over (keys are few; ids are not secret).
MAX_CACHED_KEYS = 10_000


def _local_ms() -> int:
    return int(time.time() * 1000)


class KeyCache:
    def __init__(self) -> None:
        #: By key id: the key, its stored hash, and the database clock minus ours (ms).
        self._keys: dict[str, tuple[ApiKeyRecord, str, int]] = {}
        self._generation = 0

    def get(self, key_id: str, db_now_ms: int | None = None) -> ApiKeyLookup | None:
        """The cached key, judged at ``db_now_ms`` (default: the database clock as
        estimated from the offset measured when the key was read)."""
        cached = self._keys.get(key_id)
        if cached is None:
            return None
        key, secret_hash, offset_ms = cached
        now = db_now_ms if db_now_ms is not None else _local_ms() + offset_ms
        return ApiKeyLookup(key, secret_hash, now)

    async def read(
        self, key_id: str, read: Callable[[], Awaitable[ApiKeyLookup | None]]
    ) -> ApiKeyLookup | None:
        """``read()`` the key and keep it, unless a ``forget`` came while it ran."""
        generation = self._generation
        found = await read()
        if found is not None and generation == self._generation:
            if len(self._keys) >= MAX_CACHED_KEYS:
                self._keys.clear()
            offset = found.now_ms - _local_ms()
            self._keys[key_id] = (found.key, found.secret_hash, offset)
        return found

    def forget(self) -> None:
        self._generation += 1
        self._keys.clear()
