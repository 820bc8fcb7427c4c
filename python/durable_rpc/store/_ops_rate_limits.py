"""Setting, listing and removing rate limits (``_rate_limits`` enforces them)."""

from __future__ import annotations

from durable_rpc.errors import InvalidRateLimitError, NotFoundError
from durable_rpc.store._fleet_records import RateLimit
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._rate_limits import interval_us
from durable_rpc.store._shared import require, require_namespace
from durable_rpc.store._tx import Row, Tx

SCOPES = ("key", "activity_type")
#: Bounds of a limit: beyond them a limit is a mistake (or not a limit at all).
MAX_PERMITS = 1_000_000
MAX_PERIOD_MS = 86_400_000
#: Claims a second: each is a write transaction, so a limit above this limits nothing.
MAX_RATE_PER_S = 100_000


def _rate_limit(row: Row) -> RateLimit:
    return RateLimit(
        namespace=row["namespace"],
        scope=row["scope"],
        name=row["name"],
        permits=int(row["permits"]),
        period_ms=int(row["period_ms"]),
        burst=int(row["burst"]),
        next_token_ms=int(row["next_token_ms"]),
        updated_at_ms=int(row["updated_at_ms"]),
    )


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise InvalidRateLimitError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")


def check_rate(permits: int, period_ms: int, burst: int | None) -> int:
    """Validates a limit; returns its burst (None: a full period's worth of permits)."""
    if not 1 <= permits <= MAX_PERMITS:
        raise InvalidRateLimitError(f"permits must be between 1 and {MAX_PERMITS}, got {permits}")
    if not 1 <= period_ms <= MAX_PERIOD_MS:
        raise InvalidRateLimitError(
            f"period must be between 1 ms and 1 day ({MAX_PERIOD_MS} ms), got {period_ms} ms"
        )
    if permits * 1000 > MAX_RATE_PER_S * period_ms:
        raise InvalidRateLimitError(
            f"{permits} per {period_ms} ms is more than {MAX_RATE_PER_S} claims a second"
        )
    if burst is None:
        return permits
    if not 1 <= burst <= MAX_PERMITS:
        raise InvalidRateLimitError(f"burst must be between 1 and {MAX_PERMITS}, got {burst}")
    return burst


class _RateLimitOps(_SqlOpsBase):
    async def set_rate_limit(
        self,
        namespace: str,
        scope: str,
        name: str,
        permits: int,
        period_ms: int,
        burst: int | None = None,
    ) -> RateLimit:
        """Sets the namespace's rate limit of ``scope`` (``key``: attempts scheduled with
        rate_limit_key ``name``; ``activity_type``: attempts of type ``name`` scheduled
        without a key): at most ``permits`` claims per ``period_ms``, ``burst`` (default
        ``permits``) at once; it starts from a full bucket. InvalidRateLimitError out of
        range."""
        _check_scope(scope)
        require(name, "name")
        capacity = check_rate(permits, period_ms, burst)
        interval = interval_us(permits, period_ms)

        def op(tx: Tx) -> RateLimit:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # A (re)set limit starts from a full bucket (tat in the past): the new rate
            # holds from now on, without debts of the old one.
            _wake_queues(tx, namespace)
            row = tx.one(
                "INSERT INTO rate_limits (namespace, scope, name, permits, period_ms, burst, "
                "interval_us, tat_us, next_token_ms, updated_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?) ON CONFLICT (namespace, scope, name) "
                "DO UPDATE SET permits = excluded.permits, period_ms = excluded.period_ms, "
                "burst = excluded.burst, interval_us = excluded.interval_us, tat_us = 0, "
                "next_token_ms = excluded.next_token_ms, "
                "updated_at_ms = excluded.updated_at_ms RETURNING *",
                (namespace, scope, name, permits, period_ms, capacity, interval, now, now),
            )
            assert row is not None
            return _rate_limit(row)

        return await self._write(op)

    async def remove_rate_limit(self, namespace: str, scope: str, name: str) -> None:
        """Removes it; NotFoundError when there is none."""
        _check_scope(scope)
        require(name, "name")

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            _wake_queues(tx, namespace)
            if not tx.run(
                "DELETE FROM rate_limits WHERE namespace = ? AND scope = ? AND name = ?",
                (namespace, scope, name),
            ):
                raise NotFoundError(f"no rate limit for {scope} {name!r}")

        await self._write(op)

    async def list_rate_limits(self, namespace: str) -> list[RateLimit]:
        """The namespace's rate limits, by scope then name."""

        def op(tx: Tx) -> list[RateLimit]:
            require_namespace(tx, namespace)
            return rate_limits_of(tx, namespace)

        return await self._read(op)


def _wake_queues(tx: Tx, namespace: str) -> None:
    """Wakes the activity polls of every queue of the namespace with queued activities:
    a poll held back by the old limit may wait for a token as far off as its interval
    (an hour, for 1/hour), and the changed limit may let its task go now."""
    for row in tx.all(
        "SELECT DISTINCT task_queue FROM tasks WHERE namespace = ? AND kind = 'activity' "
        "AND state = 'queued'",
        (namespace,),
    ):
        tx.notes.tasks.add((namespace, row["task_queue"], "activity"))


def rate_limits_of(tx: Tx, namespace: str) -> list[RateLimit]:
    rows = tx.all(
        "SELECT * FROM rate_limits WHERE namespace = ? ORDER BY scope, name", (namespace,)
    )
    return [_rate_limit(row) for row in rows]
