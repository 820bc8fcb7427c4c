"""Setting and reading a namespace's admission policy (``_admission`` enforces it)."""

from __future__ import annotations

from dataclasses import replace

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store._admission import (
    KEY_STRATEGIES,
    POLICIES,
    admission_of,
    admit_all,
    admit_waiting,
    counts,
    locked_policy,
)
from durable_rpc.store._admission_records import Admission
from durable_rpc.store._ops_base import _SqlOpsBase
from durable_rpc.store._shared import require_namespace
from durable_rpc.store._tx import Tx

#: Bounds that catch a mistake (the columns are INTEGERs on both backends).
MAX_OPEN_RUNS = 10_000_000
MAX_STARTS_PER_PERIOD = 1_000_000
MAX_PERIOD_MS = 86_400_000


def check_admission(
    max_open_runs: int | None,
    starts_per_period: int | None,
    period_ms: int | None,
    over_limit: str,
    max_per_key: int | None = None,
    key_strategy: str = "queue",
) -> None:
    """InvalidArgumentError (naming the field) for a policy the store cannot hold."""
    if max_per_key is not None and not 1 <= max_per_key <= MAX_OPEN_RUNS:
        raise InvalidArgumentError(
            f"max_per_key must be between 1 and {MAX_OPEN_RUNS} (or unset), got {max_per_key}"
        )
    if key_strategy not in KEY_STRATEGIES:
        raise InvalidArgumentError(
            f"key_strategy must be one of {', '.join(KEY_STRATEGIES)}, got {key_strategy!r}"
        )
    if max_open_runs is not None and not 1 <= max_open_runs <= MAX_OPEN_RUNS:
        raise InvalidArgumentError(
            f"max_open_runs must be between 1 and {MAX_OPEN_RUNS} (or unset), got {max_open_runs}"
        )
    if (starts_per_period is None) != (period_ms is None):
        raise InvalidArgumentError(
            "starts_per_period and period_ms go together (set both or neither)"
        )
    if starts_per_period is not None and not 1 <= starts_per_period <= MAX_STARTS_PER_PERIOD:
        raise InvalidArgumentError(
            f"starts_per_period must be between 1 and {MAX_STARTS_PER_PERIOD}, "
            f"got {starts_per_period}"
        )
    if period_ms is not None and not 1 <= period_ms <= MAX_PERIOD_MS:
        raise InvalidArgumentError(
            f"period_ms must be between 1 and {MAX_PERIOD_MS} (one day), got {period_ms}"
        )
    if over_limit not in POLICIES:
        raise InvalidArgumentError(
            f"over_limit must be one of {', '.join(POLICIES)}, got {over_limit!r}"
        )
    if max_open_runs is None and starts_per_period is None and max_per_key is None:
        raise InvalidArgumentError(
            "an admission policy needs max_open_runs, a rate or max_per_key "
            "(remove the policy instead)"
        )


class _AdmissionOps(_SqlOpsBase):
    async def set_namespace_admission(
        self,
        namespace: str,
        max_open_runs: int | None,
        starts_per_period: int | None,
        period_ms: int | None,
        over_limit: str,
        max_per_key: int | None = None,
        key_strategy: str = "queue",
    ) -> Admission:
        """Sets the namespace's admission policy: at most ``max_open_runs`` admitted open
        runs, at most ``starts_per_period`` starts admitted per ``period_ms`` (a token
        bucket), over the limit ``queue`` (the run waits, not yet admitted) or
        ``refuse`` (AdmissionLimitError). ``max_per_key``: admitted open runs of one
        concurrency key (StartOptions.concurrency_key) at once; over it ``key_strategy``
        ``queue`` (wait), ``cancel_newest`` (ConcurrencyKeyLimitError) or
        ``cancel_oldest`` (the key's oldest open run is cancelled; the new one waits for
        its close). Room it frees admits waiting runs at once. InvalidArgumentError for
        a policy out of bounds or with no limit."""
        check_admission(
            max_open_runs, starts_per_period, period_ms, over_limit, max_per_key, key_strategy
        )

        def op(tx: Tx) -> Admission:
            require_namespace(tx, namespace)
            now = tx.now_ms()
            # A new bucket starts full; a changed one keeps its tokens (capped by the
            # new size on its next refill). Room a raised limit frees goes to the waiting
            # runs at once (admit_waiting, under the row's lock).
            tx.run(
                "INSERT INTO namespace_admission (namespace, max_open_runs, starts_per_period, "
                "period_ms, over_limit, tokens, tokens_at_ms, updated_at_ms, max_per_key, "
                "key_strategy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (namespace) DO UPDATE SET "
                "max_per_key = excluded.max_per_key, key_strategy = excluded.key_strategy, "
                "max_open_runs = excluded.max_open_runs, "
                "starts_per_period = excluded.starts_per_period, "
                "period_ms = excluded.period_ms, over_limit = excluded.over_limit, "
                "updated_at_ms = excluded.updated_at_ms",
                (
                    namespace,
                    max_open_runs,
                    starts_per_period,
                    period_ms,
                    over_limit,
                    float(starts_per_period or 0),
                    now,
                    now,
                    max_per_key,
                    key_strategy,
                ),
            )
            admit_waiting(tx, namespace)
            return self._admission(tx, namespace)

        return await self._write(op)

    async def remove_namespace_admission(self, namespace: str) -> None:
        """Removes the policy (idempotent); every waiting run is admitted."""

        def op(tx: Tx) -> None:
            require_namespace(tx, namespace)
            if locked_policy(tx, namespace) is None:
                return
            tx.run("DELETE FROM namespace_admission WHERE namespace = ?", (namespace,))
            admit_all(tx, namespace)

        await self._write(op)

    async def get_namespace_admission(self, namespace: str) -> Admission | None:
        """The policy with its admitted open runs and waiting runs (None: no policy)."""

        def op(tx: Tx) -> Admission | None:
            require_namespace(tx, namespace)
            if tx.one("SELECT 1 FROM namespace_admission WHERE namespace = ?", (namespace,)):
                return self._admission(tx, namespace)
            return None

        return await self._read(op)

    @staticmethod
    def _admission(tx: Tx, namespace: str) -> Admission:
        row = tx.one("SELECT * FROM namespace_admission WHERE namespace = ?", (namespace,))
        assert row is not None
        admitted, waiting = counts(tx, namespace)
        return replace(admission_of(row), open_runs=admitted, waiting_runs=waiting)
