"""The bounds of what a worker keeps between a run's tasks (sticky execution).

``Worker(sticky_cache=StickyCacheOptions(...))`` bounds both per-run caches of a worker,
each on its own: the live workflow instances (``_live_runs.py``) and the histories kept
for inline decisions (``_inline.py``). Each is a :class:`BoundedCache`: at most
``max_entries`` runs and ``max_history_bytes`` of encoded history between them, least
recently used out until both hold, and an entry expires ``ttl`` after it was put (a
read never extends it). An entry larger than the byte bound alone is not kept at all.

Expiry is judged on the process's monotonic clock: it only decides what this process
keeps in memory, never a state change, so the database clock has no say here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, Generic, TypeVar

V = TypeVar("V")

MiB = 1024 * 1024
#: Today's (and the default's) entry bound: the worker has kept up to 1000 runs since
#: sticky execution began; the default byte and TTL bounds are added to it.
DEFAULT_MAX_ENTRIES = 1000
DEFAULT_MAX_HISTORY_BYTES = 16 * MiB
DEFAULT_TTL = timedelta(seconds=300)
MAX_TTL_SECONDS = 3600


class StickyCacheOptionsError(ValueError):
    """A :class:`StickyCacheOptions` value out of range; ``option`` names it."""

    reason: ClassVar[str] = "INVALID_STICKY_CACHE_OPTIONS"

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{self.reason}: StickyCacheOptions.{option} {message}")
        self.option = option


@dataclass(frozen=True, slots=True)
class StickyCacheOptions:
    """How much a worker keeps of the runs it decided last.

    ``max_entries`` runs (0 disables sticky execution: every task replays from event 1
    and no inline decisions are made), ``max_history_bytes`` of encoded history (> 0)
    and ``ttl`` (whole seconds, 1..3600) since an entry was put.
    """

    max_entries: int = DEFAULT_MAX_ENTRIES
    max_history_bytes: int = DEFAULT_MAX_HISTORY_BYTES
    ttl: timedelta = DEFAULT_TTL

    def __post_init__(self) -> None:
        if not _is_int(self.max_entries) or self.max_entries < 0:
            raise StickyCacheOptionsError(
                "max_entries", f"must be a whole number >= 0, got {self.max_entries!r}"
            )
        if not _is_int(self.max_history_bytes) or self.max_history_bytes <= 0:
            raise StickyCacheOptionsError(
                "max_history_bytes", f"must be a whole number > 0, got {self.max_history_bytes!r}"
            )
        if not isinstance(self.ttl, timedelta):
            raise StickyCacheOptionsError("ttl", f"must be a timedelta, got {self.ttl!r}")
        seconds = self.ttl.total_seconds()
        if seconds != int(seconds) or not 1 <= seconds <= MAX_TTL_SECONDS:
            raise StickyCacheOptionsError(
                "ttl", f"must be whole seconds from 1 to {MAX_TTL_SECONDS}, got {seconds}s"
            )

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: On by default, as sticky execution has always been: today's entry bound, the default
#: byte and TTL bounds.
DEFAULT_STICKY_CACHE = StickyCacheOptions()


@dataclass(frozen=True, slots=True)
class StickyCacheMetrics:
    """What a worker's live-instance cache did since the worker started.

    ``hits``: workflow tasks that continued a kept instance. ``misses``: tasks that found
    none (never kept, evicted or expired). ``evictions``: entries a bound removed (LRU
    past ``max_entries`` or ``max_history_bytes``, one too big to keep, or expired).
    ``forced_cold_replays``: tasks that found an instance the history did not continue
    (another worker decided the run meanwhile) and replayed from event 1. ``entries``
    and ``history_bytes``: what is kept now (the encoded history the kept instances
    consumed; their decoded state takes memory beyond it).
    """

    hits: int
    misses: int
    evictions: int
    forced_cold_replays: int
    entries: int
    history_bytes: int


@dataclass(slots=True)
class _Entry(Generic[V]):
    value: V
    size: int
    put_at: float


class BoundedCache(Generic[V]):
    """Values by run id, within ``options``' entry, byte and TTL bounds (see the module).

    ``on_drop`` is called with every value that leaves other than by :meth:`take` (its
    taker owns it then). ``clock`` (seconds, monotonic) is injectable for tests.
    """

    def __init__(
        self,
        options: StickyCacheOptions,
        on_drop: Callable[[V], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.clock = clock
        self._on_drop = on_drop
        self._ttl = options.ttl.total_seconds()
        # Read at every put (a put and a take per workflow task): plain attributes.
        self._max_entries = options.max_entries
        self._max_bytes = options.max_history_bytes
        self._entries: OrderedDict[str, _Entry[V]] = OrderedDict()
        self.history_bytes = 0
        #: Entries a bound removed (LRU, too big, expired).
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, run_id: object) -> bool:
        entry = self._entries.get(run_id) if isinstance(run_id, str) else None
        return entry is not None and not self._expired(entry)

    def _expired(self, entry: _Entry[V]) -> bool:
        return self.clock() - entry.put_at >= self._ttl

    def take(self, run_id: str) -> V | None:
        """Removes and returns ``run_id``'s value, None when absent or expired."""
        entry = self._entries.pop(run_id, None)
        if entry is None:
            return None
        self.history_bytes -= entry.size
        if self._expired(entry):
            self._evicted(entry)
            return None
        return entry.value

    def get(self, run_id: str) -> V | None:
        """``run_id``'s value, kept (and now the most recently used); its expiry stays."""
        entry = self._entries.get(run_id)
        if entry is None:
            return None
        if self._expired(entry):
            self._remove(run_id)
            self._evicted(entry)
            return None
        self._entries.move_to_end(run_id)
        return entry.value

    def put(self, run_id: str, value: V, size: int) -> None:
        """Keep ``value`` (``size`` bytes of encoded history) for ``run_id``, its TTL from
        now, replacing what was kept for it; then evict until the bounds hold."""
        entries = self._entries
        old = entries.pop(run_id, None)
        if old is not None:
            self.history_bytes -= old.size
            if old.value is not value:
                self._drop(old.value)
        if size > self._max_bytes:
            # Kept, it would evict everything else and still not fit.
            self._evicted(_Entry(value, size, 0.0))
            return
        now = self.clock()
        entries[run_id] = _Entry(value, size, now)
        self.history_bytes += size
        # Entries put at or before this instant have expired.
        expired_at = now - self._ttl
        # Oldest first: entries put long ago and not read since sit at the front, so the
        # expired ones there go now (others expire when read, or in sweep()). The new
        # entry fits alone and has not expired: the loop stops at it at the latest (or
        # empties a cache of max_entries=0, which a worker never builds).
        while entries and (
            len(entries) > self._max_entries
            or self.history_bytes > self._max_bytes
            or next(iter(entries.values())).put_at <= expired_at
        ):
            _, evicted = entries.popitem(last=False)
            self.history_bytes -= evicted.size
            self._evicted(evicted)

    def forget(self, run_id: str) -> None:
        """Drop ``run_id``'s value (not an eviction: the run needs it no more)."""
        entry = self._remove(run_id)
        if entry is not None:
            self._drop(entry.value)

    def sweep(self) -> None:
        """Evict every expired entry (wherever reads moved it)."""
        for run_id in [k for k, e in self._entries.items() if self._expired(e)]:
            entry = self._remove(run_id)
            if entry is not None:
                self._evicted(entry)

    def clear(self) -> None:
        """Drop everything (the worker stops)."""
        entries = list(self._entries.values())
        self._entries.clear()
        self.history_bytes = 0
        for entry in entries:
            self._drop(entry.value)

    def _remove(self, run_id: str) -> _Entry[V] | None:
        entry = self._entries.pop(run_id, None)
        if entry is not None:
            self.history_bytes -= entry.size
        return entry

    def _evicted(self, entry: _Entry[V]) -> None:
        self.evictions += 1
        self._drop(entry.value)

    def _drop(self, value: V) -> None:
        if self._on_drop is not None:
            self._on_drop(value)


__all__ = [
    "DEFAULT_STICKY_CACHE",
    "BoundedCache",
    "StickyCacheMetrics",
    "StickyCacheOptions",
    "StickyCacheOptionsError",
]
