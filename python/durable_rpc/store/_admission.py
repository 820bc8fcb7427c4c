"""Namespace admission: a maximum of open runs and a start rate per namespace, enforced
by the store on every start (StartWorkflow, SignalWithStartWorkflow) of the namespace.

A namespace's policy is its row of ``namespace_admission``. A namespace without a row is
unlimited and its starts stay what they were: the run's INSERT reads the row with a
primary-key probe folded into its RETURNING (``ADMISSION_PROBE``), no statement more;
PostgreSQL's hot-path start and decision functions hand such a namespace to the general
path (a start, and a decision that closes its run).

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

from durable_rpc.errors import AdmissionLimitError, ConcurrencyKeyLimitError
from durable_rpc.store._admission_records import Admission
from durable_rpc.store._tx import Row, Tx
from durable_rpc.v1 import history_pb2

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


def admission_tables(bigint: str, real: str) -> tuple[str, ...]:
    """The policy table, the runs' admission mark and the index of waiting runs (partial:
    a run that never waits writes no index entry)."""
    return (
        f"""CREATE TABLE namespace_admission (
            namespace TEXT PRIMARY KEY,
            max_open_runs INTEGER CHECK (max_open_runs IS NULL OR max_open_runs > 0),
            starts_per_period INTEGER CHECK (starts_per_period IS NULL OR starts_per_period > 0),
            period_ms {bigint} CHECK (period_ms IS NULL OR period_ms > 0),
            over_limit TEXT NOT NULL CHECK (over_limit IN ('queue', 'refuse')),
            tokens {real} NOT NULL,
            tokens_at_ms {bigint} NOT NULL,
            next_admit_ms {bigint},
            updated_at_ms {bigint} NOT NULL
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


def _tokens(policy: Row, now: int) -> float:
    """The bucket's tokens at ``now`` (infinite without a rate)."""
    if policy["starts_per_period"] is None:
        return math.inf
    rate = float(policy["starts_per_period"])
    elapsed = max(0, now - int(policy["tokens_at_ms"]))
    tokens = min(rate, float(policy["tokens"]) + elapsed * rate / int(policy["period_ms"]))
    # A token due at the millisecond ``_save`` computed (a ceiling) can come out a hair
    # under a whole one in floating point (0.333.. + 0.666.. = 0.999..): the due pass woken
    # then would admit nothing and wake again 1 ms later. Snap such values to the whole.
    whole = round(tokens)
    return float(whole) if abs(tokens - whole) < 1e-9 else tokens


def _save(tx: Tx, policy: Row, tokens: float, now: int, waiting: int) -> None:
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


def _key_admitted(tx: Tx, namespace: str, key: str) -> int:
    """Admitted open runs of a concurrency key (index ``runs_by_concurrency_key``)."""
    return int(
        tx.value(
            "SELECT count(*) FROM runs WHERE namespace = ? AND concurrency_key = ? "
            "AND status = 'running' AND admission IS NULL",
            (namespace, key),
        )
    )


def _key_open(tx: Tx, namespace: str, key: str) -> int:
    """Open runs of a concurrency key, admitted or waiting."""
    return int(
        tx.value(
            "SELECT count(*) FROM runs WHERE namespace = ? AND concurrency_key = ? "
            "AND status = 'running'",
            (namespace, key),
        )
    )


def cancel_waiting_run(tx: Tx, namespace: str, run_id: str, reason: str) -> None:
    """Closes a run not yet admitted as cancelled, at once: none of its code ever ran, so
    nothing needs to learn of it; it held no room, so it frees none."""
    from durable_rpc.store._logic import failure_bytes
    from durable_rpc.store._shared import append_event, close_run

    now = tx.now_ms()
    append_event(tx, namespace, run_id, now, "workflow_cancelled", history_pb2.WorkflowCancelled())
    failure = failure_bytes(reason or "cancelled before admission", "CancelledError")
    close_run(tx, namespace, run_id, "cancelled", now, failure=failure)


def _cancel_oldest(tx: Tx, namespace: str, key: str, new_run_id: str) -> None:
    """CANCEL_OLDEST: the key's oldest open run not already being cancelled makes room for
    ``new_run_id``: closed at once if not yet admitted, else asked to cancel (its code
    cleans up; its close admits the new run)."""
    from durable_rpc.store._shared import request_cancel_run

    oldest = tx.one(
        "SELECT * FROM runs WHERE namespace = ? AND concurrency_key = ? AND status = 'running' "
        "AND run_id <> ? AND (admission IS NOT NULL OR cancel_requested = 0) "
        f"ORDER BY id LIMIT 1{tx.row_lock_suffix}",
        (namespace, key, new_run_id),
    )
    if oldest is None:  # every older run of the key is being cancelled already
        return
    reason = f"cancelled by concurrency key {key!r} (CANCEL_OLDEST): run {new_run_id} started"
    if oldest["admission"] is not None:
        cancel_waiting_run(tx, namespace, oldest["run_id"], reason)
    else:
        tx.remember_run(oldest)
        request_cancel_run(tx, namespace, oldest, reason, tx.now_ms())


def admit_new_run(tx: Tx, namespace: str, run_id: str, key: str | None = None) -> bool:
    """A new run of a namespace with a policy (just inserted, counted as open): admits it
    (False) or defers it (True); refuses it by raising ``AdmissionLimitError`` or, for its
    concurrency key under CANCEL_NEWEST, ``ConcurrencyKeyLimitError``."""
    policy = locked_policy(tx, namespace)
    if policy is None:  # removed since the insert's probe (READ COMMITTED)
        return False
    per_key = policy["max_per_key"] if key is not None else None
    if key is not None and per_key is not None and _key_open(tx, namespace, key) - 1 >= per_key:
        if policy["key_strategy"] == "cancel_newest":
            raise ConcurrencyKeyLimitError(
                f"start refused: concurrency key {key!r} of namespace {namespace!r} has its "
                f"limit of {per_key} open runs (strategy CANCEL_NEWEST)"
            )
        if policy["key_strategy"] == "cancel_oldest":
            _cancel_oldest(tx, namespace, key, run_id)
            policy = locked_policy(tx, namespace)  # a close admits: the bucket may differ
            assert policy is not None
    now = tx.now_ms()
    tokens = _tokens(policy, now)
    admitted, waiting = counts(tx, namespace)
    limit = policy["max_open_runs"]
    room = limit is None or admitted - 1 < limit  # the new run is among the admitted
    key_room = key is None or per_key is None or _key_open(tx, namespace, key) - 1 < per_key
    if waiting == 0 and room and tokens >= 1 and key_room:
        _save(tx, policy, tokens - 1, now, 0)
        return False
    if policy["over_limit"] == "refuse" and not (room and tokens >= 1):
        raise AdmissionLimitError(
            f"start refused by namespace {namespace!r} admission: {refusal(policy, admitted - 1)}"
        )
    tx.run(
        "UPDATE runs SET admission = 'deferred' WHERE namespace = ? AND run_id = ?",
        (namespace, run_id),
    )
    _save(tx, policy, tokens, now, waiting + 1)
    if policy["max_per_key"] is None:
        return True  # whatever waits before it waits for room or a token too
    # Earlier waiting runs may wait for their own key only: the run may go past them.
    admit_waiting(tx, namespace)
    return (
        tx.value(
            "SELECT admission FROM runs WHERE namespace = ? AND run_id = ?", (namespace, run_id)
        )
        is not None
    )


def admit_waiting(tx: Tx, namespace: str) -> int:
    """Admits the namespace's waiting runs, in start order, as far as room and tokens
    allow (a run whose concurrency key has its limit stays, later runs of other keys
    may go); returns how many. Each gets its first workflow task now."""
    # Imported here: _shared imports this module (close_run admits).
    from durable_rpc.store._shared import ensure_workflow_task

    policy = locked_policy(tx, namespace)
    if policy is None:
        return 0
    now = tx.now_ms()
    tokens = _tokens(policy, now)
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
    _save(tx, policy, tokens - admitted_now, now, left)
    if left and admitted_now == ADMIT_BATCH:
        tx.notes.due.add(now)  # a full batch: the due pass takes the next at once
    return admitted_now


def admit_all(tx: Tx, namespace: str) -> None:
    """The policy was removed: every waiting run is admitted (marks cleared, tasks made)."""
    from durable_rpc.store._shared import ensure_workflow_task

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
