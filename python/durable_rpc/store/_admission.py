"""Namespace admission: a maximum of open runs and a start rate per namespace, enforced
by the store on every start (StartWorkflow, SignalWithStartWorkflow) of the namespace.

A namespace's policy is its row of ``namespace_admission``. A namespace without a row is
unlimited and its starts stay what they were: the run's INSERT reads the row with a
primary-key probe folded into its RETURNING (``ADMISSION_PROBE``), no statement more;
PostgreSQL's hot-path start function admits a run at once when the policy allows it
(nothing waits, room and a token), and its decision function closes a run when no run
waits (there is no one to admit); every other case of a namespace with a policy is this
general path's (``pg_functions/*.v30.sql``).

With a row, the start locks it (PostgreSQL FOR UPDATE: starts and closes of the namespace
on every replica serialize on it, and each counts the others' committed runs) and either
admits the new run (it counts toward the open runs and takes one token of the rate's
bucket), defers it (``runs.admission = 'deferred'``: the run exists, has its
WorkflowStarted, answers describe, takes signals, cancel and terminate, but gets no
workflow task: ``ensure_workflow_task`` skips it) or refuses it (``AdmissionLimitError``:
the transaction rolls back, nothing is kept). A start never passes a run already waiting:
while any waits, a new start waits behind it (admission is in start order, ``runs.id``).

Waiting runs are admitted in start order (``admit_waiting``) in the transaction that
frees room: a run's close (``close_run``), a raised or removed limit; and, when the rate
is what holds them, by the due pass at the bucket's next token (``next_admit_ms``, the
database clock). Child runs and continue-as-new successors are never deferred (their
parent or predecessor was admitted: deferring them could deadlock a parent holding a
slot); they count toward the open runs, so a continue-as-new frees no room.
"""

from __future__ import annotations

import math

from durable_rpc.store._admission_records import Admission
from durable_rpc.store._dialects import Dialect
from durable_rpc.store._shared import ensure_workflow_task
from durable_rpc.store._tx import Row, Tx

#: The run INSERT's extra RETURNING column (table ``runs``): whether the namespace has an
#: admission policy (one primary-key probe inside the same statement).
ADMISSION_PROBE = (
    "(SELECT 1 FROM namespace_admission a WHERE a.namespace = runs.namespace) AS admission_on"
)

#: At most this many waiting runs are admitted by one transaction; more room (a limit
#: raised by thousands) is filled by the due pass, a batch at a time.
ADMIT_BATCH = 500

POLICIES = ("queue", "refuse")
KEY_STRATEGIES = ("queue", "cancel_newest", "cancel_oldest")
#: A concurrency key longer than this is a mistake.
MAX_CONCURRENCY_KEY = 255


def admission_tables(d: Dialect) -> tuple[str, ...]:
    """The policy table, the runs' admission mark and the index of waiting runs (partial:
    a run that never waits writes no index entry)."""
    return (
        f"""CREATE TABLE namespace_admission (
            namespace TEXT PRIMARY KEY,
            max_open_runs INTEGER CHECK (max_open_runs IS NULL OR max_open_runs > 0),
            starts_per_period INTEGER CHECK (starts_per_period IS NULL OR starts_per_period > 0),
            period_ms {d.bigint} CHECK (period_ms IS NULL OR period_ms > 0),
            over_limit TEXT NOT NULL CHECK (over_limit IN ('queue', 'refuse')),
            tokens {d.double} NOT NULL,
            tokens_at_ms {d.bigint} NOT NULL,
            next_admit_ms {d.bigint},
            updated_at_ms {d.bigint} NOT NULL
        )""",
        "ALTER TABLE runs ADD COLUMN admission TEXT",
        "CREATE INDEX runs_waiting_admission ON runs (namespace, id) WHERE admission IS NOT NULL",
    )


def concurrency_key_tables() -> tuple[str, ...]:
    """Migration 19: the runs' concurrency key (a partial index: a run without a key
    writes no entry) and the namespace policy's per-key limit and strategy."""
    return (
        "ALTER TABLE runs ADD COLUMN concurrency_key TEXT",
        "CREATE INDEX runs_by_concurrency_key ON runs (namespace, concurrency_key, status) "
        "WHERE concurrency_key IS NOT NULL",
        "ALTER TABLE namespace_admission ADD COLUMN max_per_key INTEGER "
        "CHECK (max_per_key IS NULL OR max_per_key > 0)",
        "ALTER TABLE namespace_admission ADD COLUMN key_strategy TEXT NOT NULL DEFAULT 'queue' "
        "CHECK (key_strategy IN ('queue', 'cancel_newest', 'cancel_oldest'))",
    )


def admission_of(row: Row) -> Admission:
    return Admission(
        namespace=row["namespace"],
        max_open_runs=row["max_open_runs"],
        starts_per_period=row["starts_per_period"],
        period_ms=row["period_ms"],
        over_limit=row["over_limit"],
        updated_at_ms=int(row["updated_at_ms"]),
        max_per_key=row["max_per_key"],
        key_strategy=row["key_strategy"],
    )


def locked_policy(tx: Tx, namespace: str) -> Row | None:
    """The namespace's policy row, locked for the rest of the transaction."""
    return tx.one(
        f"SELECT * FROM namespace_admission WHERE namespace = ?{tx.row_lock_suffix}",
        (namespace,),
    )


def counts(tx: Tx, namespace: str) -> tuple[int, int]:
    """(admitted open runs, waiting runs) of the namespace. A waiting run is open too
    (status running); closing one clears its mark (``close_run``)."""
    row = tx.one(
        "SELECT (SELECT count(*) FROM runs WHERE namespace = ? AND status = 'running') AS open, "
        "(SELECT count(*) FROM runs WHERE namespace = ? AND admission IS NOT NULL) AS waiting",
        (namespace, namespace),
    )
    assert row is not None
    waiting = int(row["waiting"])
    return int(row["open"]) - waiting, waiting


def bucket_tokens(policy: Row, now: int) -> float:
    """The bucket's tokens at ``now`` (infinite without a rate)."""
    if policy["starts_per_period"] is None:
        return math.inf
    rate = float(policy["starts_per_period"])
    elapsed = max(0, now - int(policy["tokens_at_ms"]))
    tokens = min(rate, float(policy["tokens"]) + elapsed * rate / int(policy["period_ms"]))
    # A token due at the millisecond ``save_bucket`` computed (a ceiling) can come out a hair
    # under a whole one in floating point (0.333.. + 0.666.. = 0.999..): the due pass woken
    # then would admit nothing and wake again 1 ms later. Snap such values to the whole.
    whole = round(tokens)
    return float(whole) if abs(tokens - whole) < 1e-9 else tokens


def save_bucket(tx: Tx, policy: Row, tokens: float, now: int, waiting: int) -> None:
    """Writes the bucket back and when the due pass must admit next: only when runs wait
    for a token (room is freed by a close, which admits itself)."""
    next_admit: int | None = None
    rate = policy["starts_per_period"]
    if rate is not None and waiting > 0 and tokens < 1:
        next_admit = now + math.ceil((1 - tokens) * int(policy["period_ms"]) / rate)
        tx.notes.due.add(next_admit)
    tx.run(
        "UPDATE namespace_admission SET tokens = ?, tokens_at_ms = ?, next_admit_ms = ? "
        "WHERE namespace = ?",
        (0.0 if math.isinf(tokens) else tokens, now, next_admit, policy["namespace"]),
    )


def refusal(policy: Row, admitted: int) -> str:
    """Why a start is over the policy (the describe and refusal sentence's core)."""
    limit = policy["max_open_runs"]
    if limit is not None and admitted >= limit:
        return f"limit {limit} open runs reached"
    rate, period = policy["starts_per_period"], policy["period_ms"]
    if rate is not None:
        return f"rate {rate} starts per {period} ms reached"
    return "earlier starts wait for admission"


def _any_waiting(tx: Tx, namespace: str) -> bool:
    """Whether a run of the namespace waits for admission (the partial index)."""
    return bool(
        tx.value(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE namespace = ? AND admission IS NOT NULL)",
            (namespace,),
        )
    )


def _key_admitted(tx: Tx, namespace: str, key: str) -> int:
    """Admitted open runs of a concurrency key (index ``runs_by_concurrency_key``)."""
    return int(
        tx.value(
            "SELECT count(*) FROM runs WHERE namespace = ? AND concurrency_key = ? "
            "AND status = 'running' AND admission IS NULL",
            (namespace, key),
        )
    )


def admit_waiting(tx: Tx, namespace: str) -> int:
    """Admits the namespace's waiting runs, in start order, as far as room and tokens
    allow (a run whose concurrency key has its limit stays, later runs of other keys
    may go); returns how many. Each gets its first workflow task now."""
    policy = locked_policy(tx, namespace)
    if policy is None:
        return 0
    if policy["next_admit_ms"] is None and not _any_waiting(tx, namespace):
        # Nobody to admit (the common close): no count of the open runs, and the bucket
        # refills the same whether or not it is written back now.
        return 0
    now = tx.now_ms()
    tokens = bucket_tokens(policy, now)
    admitted, waiting = counts(tx, namespace)
    limit = policy["max_open_runs"]
    per_key = policy["max_per_key"]
    room = ADMIT_BATCH if limit is None else max(0, min(ADMIT_BATCH, limit - admitted))
    take = min(room, waiting, ADMIT_BATCH if math.isinf(tokens) else int(tokens))
    rows = (
        tx.all(
            "SELECT run_id, task_queue, concurrency_key FROM runs WHERE namespace = ? "
            "AND admission IS NOT NULL ORDER BY id LIMIT ?",
            (namespace, take if per_key is None else ADMIT_BATCH),
        )
        if take > 0
        else []
    )
    in_key: dict[str, int] = {}
    admitted_now = 0
    for row in rows:
        if admitted_now >= take:
            break
        key = row["concurrency_key"]
        if per_key is not None and key is not None:
            if key not in in_key:
                in_key[key] = _key_admitted(tx, namespace, key)
            if in_key[key] >= per_key:
                continue  # its key is full: it keeps its place, later keys may go
            in_key[key] += 1
        tx.run(
            "UPDATE runs SET admission = NULL WHERE namespace = ? AND run_id = ?",
            (namespace, row["run_id"]),
        )
        ensure_workflow_task(tx, namespace, row["run_id"], row["task_queue"], now)
        admitted_now += 1
    left = waiting - admitted_now
    save_bucket(tx, policy, tokens - admitted_now, now, left)
    if left and admitted_now == ADMIT_BATCH:
        tx.notes.due.add(now)  # a full batch: the due pass takes the next at once
    return admitted_now


def admit_all(tx: Tx, namespace: str) -> None:
    """The policy was removed: every waiting run is admitted (marks cleared, tasks made)."""
    now = tx.now_ms()
    rows = tx.all(
        "UPDATE runs SET admission = NULL WHERE namespace = ? AND admission IS NOT NULL "
        "RETURNING run_id, task_queue",
        (namespace,),
    )
    for row in rows:
        ensure_workflow_task(tx, namespace, row["run_id"], row["task_queue"], now)


def due_namespaces(tx: Tx, now: int) -> list[str]:
    """Namespaces whose waiting runs' next token is due (the due pass admits them)."""
    rows = tx.all(
        "SELECT namespace FROM namespace_admission WHERE next_admit_ms IS NOT NULL "
        "AND next_admit_ms <= ? ORDER BY next_admit_ms",
        (now,),
    )
    return [str(row["namespace"]) for row in rows]


def next_admit_ms(tx: Tx) -> int | None:
    value = tx.value("SELECT MIN(next_admit_ms) AS m FROM namespace_admission")
    return None if value is None else int(value)


def deferred_reason(tx: Tx, namespace: str, run: Row) -> str:
    """Describe's sentence for a run waiting for admission."""
    policy = tx.one("SELECT * FROM namespace_admission WHERE namespace = ?", (namespace,))
    ahead = int(
        tx.value(
            "SELECT count(*) FROM runs WHERE namespace = ? AND admission IS NOT NULL AND id < ?",
            (namespace, run["id"]),
        )
    )
    before = f"; {ahead} earlier starts wait before it" if ahead else ""
    if policy is None:
        return f"Deferred by admission{before}."
    key, per_key = run["concurrency_key"], policy["max_per_key"]
    if key is not None and per_key is not None and _key_admitted(tx, namespace, key) >= per_key:
        return (
            f"Deferred by admission: concurrency key {key!r} has its limit of {per_key} "
            f"open runs{before}."
        )
    admitted, _ = counts(tx, namespace)
    return f"Deferred by admission: {refusal(policy, admitted)}{before}."
