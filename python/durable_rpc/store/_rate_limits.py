"""Rate limits: at most ``permits`` activity attempts claimed per ``period``, for the
attempts of one named downstream (scope ``key``: ActivityOptions.rate_limit_key) or of
one activity type scheduled without a key (scope ``activity_type``), across every task
queue, replica and worker of a namespace. Enforced by the claim itself.

A limit is a row of ``rate_limits``: the configuration and the bucket's state, kept as
GCRA (the token bucket's exact equivalent with one number): ``tat_us``, the theoretical
arrival time of the next claim. A claim at ``now`` may take a token when
``tat_us - tolerance <= now`` (``tolerance = (burst - 1) * interval``: ``burst`` claims
may go at once after a quiet time) and then sets ``tat_us = max(tat_us, now) +
interval``. ``next_token_ms`` is when the bucket next has a token (ceiling of
``tat_us - tolerance`` in ms), so a claim filters out tasks whose bucket is empty with
one column compare and a poll knows when to look again. Every time is the database's
(``tx.now_ms()``), in the claim's own transaction; on PostgreSQL the bucket row is locked
FOR UPDATE before the take, so two replicas claiming at once never both take the last
token (SQLite has one writer).

A namespace without a rate limit pays an uncorrelated probe of the empty prefix of
``rate_limits`` folded into the candidate SELECT it runs anyway (``RATE_OPEN``), no
statement more; an empty claim asks once more, for the poll's next look
(``next_token_ms``).
PostgreSQL's hot-path decision takes its eager claims' tokens itself, by the same rule
in one conditional UPDATE (``pg_functions/drpc_record_decision.v30.sql``).
"""

from __future__ import annotations

import math

from durable_rpc.store._dialects import Dialect
from durable_rpc.store._tx import Tx

#: The bucket a task takes its token from (alias = the task row): its key's when it was
#: scheduled with one, else its activity type's.
_BUCKET = (
    "r.namespace = {a}.namespace AND r.scope = CASE WHEN {a}.rate_limit_key IS NULL "
    "THEN 'activity_type' ELSE 'key' END AND r.name = COALESCE({a}.rate_limit_key, "
    "{a}.activity_type)"
)


def rate_limited_column(alias: str) -> str:
    """A SELECT's extra column: 1 when the task's bucket exists (the claim must take a
    token from it), NULL otherwise. One primary-key probe of the chosen row."""
    return (
        f"(SELECT 1 FROM rate_limits r WHERE {_BUCKET.format(a=alias)}) AS rate_limited, "
        f"{alias}.rate_limit_key AS rate_key, {alias}.activity_type AS rate_type"
    )


def rate_open(alias: str, now: str) -> str:
    """A claim's condition (params: namespace): the task's bucket has a token at ``now``
    (an SQL expression), or the namespace has no rate limit at all (evaluated once per
    statement: no per-row cost then)."""
    return (
        "(NOT EXISTS (SELECT 1 FROM rate_limits r0 WHERE r0.namespace = ?) "
        f"OR NOT EXISTS (SELECT 1 FROM rate_limits r WHERE {_BUCKET.format(a=alias)} "
        f"AND r.next_token_ms > {now}))"
    )


def rate_limits_table(d: Dialect) -> tuple[str, ...]:
    """The limits table and the tasks' key column (same shape on both backends)."""
    return (
        f"""CREATE TABLE rate_limits (
            namespace TEXT NOT NULL,
            scope TEXT NOT NULL CHECK (scope IN ('key', 'activity_type')),
            name TEXT NOT NULL,
            permits {d.bigint} NOT NULL CHECK (permits > 0),
            period_ms {d.bigint} NOT NULL CHECK (period_ms > 0),
            burst {d.bigint} NOT NULL CHECK (burst > 0),
            interval_us {d.bigint} NOT NULL CHECK (interval_us > 0),
            tat_us {d.bigint} NOT NULL,
            next_token_ms {d.bigint} NOT NULL,
            updated_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, scope, name)
        )""",
        # The named downstream an activity task takes its token from (NULL: its type's).
        "ALTER TABLE tasks ADD COLUMN rate_limit_key TEXT",
    )


def interval_us(permits: int, period_ms: int) -> int:
    """The time one permit stands for (µs; at least 1: the rate is capped far above)."""
    return max(1, period_ms * 1000 // permits)


def next_token_ms(tat_us: int, burst: int, interval: int) -> int:
    """When a bucket of this state next has a token (ms, rounded up: never early)."""
    return math.ceil((tat_us - (burst - 1) * interval) / 1000)


def take_token(tx: Tx, namespace: str, scope: str, name: str, now: int) -> int | None:
    """Takes a token from the bucket for a claim at ``now`` (ms, database clock): None
    when taken (or the limit was removed meanwhile), else when the next token is due.
    Locks the row for the rest of the transaction: a concurrent claim waits and then
    sees this take."""
    row = tx.one(
        "SELECT burst, interval_us, tat_us FROM rate_limits "
        f"WHERE namespace = ? AND scope = ? AND name = ?{tx.row_lock_suffix}",
        (namespace, scope, name),
    )
    if row is None:
        return None
    burst, interval, tat = int(row["burst"]), int(row["interval_us"]), int(row["tat_us"])
    now_us = now * 1000
    if tat - (burst - 1) * interval > now_us:
        return next_token_ms(tat, burst, interval)
    tat = max(tat, now_us) + interval
    tx.run(
        "UPDATE rate_limits SET tat_us = ?, next_token_ms = ? "
        "WHERE namespace = ? AND scope = ? AND name = ?",
        (tat, next_token_ms(tat, burst, interval), namespace, scope, name),
    )
    return None


def bucket_of(rate_key: str | None, activity_type: str) -> tuple[str, str]:
    """The (scope, name) of a task's bucket, as ``_BUCKET`` picks it."""
    return ("key", rate_key) if rate_key is not None else ("activity_type", activity_type)


def next_token_after(tx: Tx, namespace: str, now: int) -> int | None:
    """When the namespace's earliest empty bucket next has a token (None: none is
    empty): an empty claim's poll looks again then, unless woken before."""
    value = tx.value(
        "SELECT min(next_token_ms) FROM rate_limits WHERE namespace = ? AND next_token_ms > ?",
        (namespace, now),
    )
    return None if value is None else int(value)
