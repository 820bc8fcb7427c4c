"""What every part of :class:`~durable_rpc.store._ops.Store` works against: the store's
options and counters, and the two transaction runners a backend supplies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from durable_rpc.store._options import StoreOptions, StoreStats
from durable_rpc.store._tx import Tx

T = TypeVar("T")


class _SqlOpsBase:
    """The ground of the store's parts (``_ops_*.py``): each part subclasses it, or the
    parts it calls, so every ``self.`` it uses is typed."""

    _options: StoreOptions
    _stats: StoreStats

    async def _write(self, fn: Callable[[Tx], T]) -> T:
        """Runs ``fn`` in a write transaction (rolled back alone if it raises); returns
        after the commit. Supplied by the backend."""
        raise NotImplementedError

    async def _read(self, fn: Callable[[Tx], T]) -> T:
        """Runs ``fn`` on a consistent read snapshot. Supplied by the backend."""
        raise NotImplementedError

    async def _read_latest(self, fn: Callable[[Tx], T]) -> T:
        """Runs ``fn``, a read whose statements need no common snapshot: each may see the
        latest committed state (a later statement only looks for what an earlier one found
        committed, e.g. a closed run's append-only history). A backend may then skip the
        transaction (PostgreSQL: one round trip instead of three); by default, ``_read``."""
        return await self._read(fn)
