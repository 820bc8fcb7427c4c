"""The API keys a store has read, kept until they may have changed.

With authentication on every call looks its key up; a read per call cost ~11% of
throughput on SQLite. Each backend says when to ``forget`` (SQLite: its own key writes
and other processes' commits; PostgreSQL: key NOTIFYs and a lost LISTEN connection);
this class only keeps the keys and refuses to cache a read that a ``forget`` overtook.

Key ids found in no row are kept too, until the same ``forget``: a caller repeating an
unknown id costs no read, and answers as fast as a wrong secret for a real key does.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from durable_rpc.store._admin_records import ApiKeyLookup, ApiKeyRecord

#: Past this many cached keys the cache starts over (keys are few; ids are not secret).
MAX_CACHED_KEYS = 10_000
#: Unknown key ids kept, least recently asked for dropped first: the ids come from
#: callers, so they get a bound of their own that never pushes out a real key.
MAX_UNKNOWN_KEY_IDS = 10_000


def _local_ms() -> int:
    return int(time.time() * 1000)


class KeyCache:
    def __init__(self) -> None:
        #: By key id: the key, its stored hash, and the database clock minus ours (ms).
        self._keys: dict[str, tuple[ApiKeyRecord, str, int]] = {}
        #: Key ids a read found no key for (the values are unused).
        self._unknown: OrderedDict[str, None] = OrderedDict()
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

    def _is_unknown(self, key_id: str) -> bool:
        """Whether a read since the last ``forget`` found no key ``key_id``."""
        if key_id not in self._unknown:
            return False
        self._unknown.move_to_end(key_id)
        return True

    async def lookup(
        self,
        key_id: str,
        read: Callable[[], Awaitable[ApiKeyLookup | None]],
        db_now_ms: int | None = None,
    ) -> ApiKeyLookup | None:
        """The key as cached (``get``), None for an id known to have no key, else
        ``read`` it."""
        cached = self.get(key_id, db_now_ms)
        if cached is not None or self._is_unknown(key_id):
            return cached
        return await self.read(key_id, read)

    async def read(
        self, key_id: str, read: Callable[[], Awaitable[ApiKeyLookup | None]]
    ) -> ApiKeyLookup | None:
        """``read()`` the key and keep it (or that there is none), unless a ``forget``
        came while it ran."""
        generation = self._generation
        found = await read()
        if generation != self._generation:
            return found
        if found is None:
            self._unknown[key_id] = None
            if len(self._unknown) > MAX_UNKNOWN_KEY_IDS:
                self._unknown.popitem(last=False)
            return None
        if len(self._keys) >= MAX_CACHED_KEYS:
            self._keys.clear()
        offset = found.now_ms - _local_ms()
        self._keys[key_id] = (found.key, found.secret_hash, offset)
        return found

    def forget(self) -> None:
        self._generation += 1
        self._keys.clear()
        self._unknown.clear()
