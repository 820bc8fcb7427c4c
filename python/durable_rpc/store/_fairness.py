"""Priority and fairness of claims: the order in which queued tasks are claimed.

A run has a ``priority`` (1 = most urgent ... 5, default 3) and an optional
``fairness_key`` (e.g. a tenant); its workflow and activity tasks carry both. A queued
task is claimed in ``(priority, fairness_pass, task_id)`` order, read from one partial
index (``tasks_ready``, queued tasks only) whose order is the claim order: the claim is
the first entry the claimer's filters accept, never a scan of the backlog to sort it.

The pass is a virtual time within a (namespace, task queue, kind, priority):

- a task without a fairness key has pass 0 and the enqueue writes nothing more, so
  those tasks are claimed first-in first-out (task_id) within their priority, ahead of
  keyed ones (fairness is among keys, not against unkeyed work);
- a task with a key gets ``max(key's last pass + 1, floor)``, the floor being the
  queue's current pass (the smallest pass still queued, never going back: kept in the
  key '' row). One key's backlog of 10,000 takes passes floor .. floor + 9,999; another
  key's 10 tasks enqueued later start at the floor and interleave one for one with it.
  Only an enqueue with a key reads and writes ``fairness_passes`` (in its transaction).

A task that is not queued (waiting for its due time, a leased task whose lease expired)
is outside ``tasks_ready``: the claim takes one of those (``tasks_claim``, due order)
only when no queued task is claimable, and the due pass makes it queued meanwhile, where
it keeps its priority and pass.
"""

from __future__ import annotations

from durable_rpc.errors import InvalidFairnessKeyError, InvalidPriorityError
from durable_rpc.store._dialects import Dialect
from durable_rpc.store._tx import Tx

DEFAULT_PRIORITY = 3
MIN_PRIORITY = 1
MAX_PRIORITY = 5
#: Longest fairness key (characters): a tenant or customer id, not a document.
MAX_FAIRNESS_KEY_CHARS = 128


def check_priority(priority: int | None) -> int:
    """The priority to store (None: the default)."""
    if priority is None:
        return DEFAULT_PRIORITY
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidPriorityError(
            f"priority must be {MIN_PRIORITY} (most urgent) to {MAX_PRIORITY}, got {priority}"
        )
    return priority


def check_fairness_key(key: str | None) -> str | None:
    """The fairness key to store (None or '': none)."""
    if not key:
        return None
    if len(key) > MAX_FAIRNESS_KEY_CHARS:
        raise InvalidFairnessKeyError(
            f"fairness_key must be at most {MAX_FAIRNESS_KEY_CHARS} characters, got {len(key)}"
        )
    return key


#: Which tasks the ordered probe reads (the partial index ``tasks_ready``'s predicate:
#: the query must say it literally for SQLite to use the index).
READY = "state = 'queued'"
#: The claim order (``tasks_ready``'s columns after the equality prefix).
READY_ORDER = " ORDER BY priority, fairness_pass, task_id LIMIT 1"
#: The order of the tasks outside ``tasks_ready`` (due waiting ones, expired leases).
DUE_ORDER = " ORDER BY due_ms, task_id LIMIT 1"


def fairness_schema(d: Dialect) -> tuple[str, ...]:
    """The columns, the claim-order index and the pass table (same on both backends).
    Existing rows get the default priority and pass 0: FIFO, as before."""
    return (
        f"ALTER TABLE runs ADD COLUMN priority INTEGER NOT NULL DEFAULT {DEFAULT_PRIORITY}",
        "ALTER TABLE runs ADD COLUMN fairness_key TEXT",
        f"ALTER TABLE tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT {DEFAULT_PRIORITY}",
        "ALTER TABLE tasks ADD COLUMN fairness_key TEXT",
        f"ALTER TABLE tasks ADD COLUMN fairness_pass {d.bigint} NOT NULL DEFAULT 0",
        "CREATE INDEX tasks_ready ON tasks "
        "(namespace, kind, task_queue, priority, fairness_pass, task_id) WHERE state = 'queued'",
        # One row per (queue, kind, priority, key) that was used, and the key '' row:
        # the queue's floor. Not per run (retention leaves them).
        f"""CREATE TABLE fairness_passes (
            namespace TEXT NOT NULL,
            task_queue TEXT NOT NULL,
            kind TEXT NOT NULL,
            priority INTEGER NOT NULL,
            fairness_key TEXT NOT NULL,
            pass {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, task_queue, kind, priority, fairness_key)
        )""",
    )


def assign_pass(tx: Tx, namespace: str, task_queue: str, kind: str, priority: int, key: str) -> int:
    """The pass of a new task of fairness key ``key``; records it as the key's last."""
    params = (namespace, task_queue, kind, priority)
    stored = tx.value(
        "SELECT pass FROM fairness_passes WHERE namespace = ? AND task_queue = ? "
        "AND kind = ? AND priority = ? AND fairness_key = ''",
        params,
    )
    # The smallest keyed pass still queued (one seek of tasks_ready): what claims reach.
    queued = tx.value(
        "SELECT fairness_pass FROM tasks WHERE namespace = ? AND kind = ? AND task_queue = ? "
        f"AND {READY} AND priority = ? AND fairness_pass > 0 ORDER BY fairness_pass LIMIT 1",
        (namespace, kind, task_queue, priority),
    )
    floor = max(int(stored or 0), int(queued or 0), 1)
    if queued is not None and int(queued) > int(stored or 0):
        # The floor only rises: a queue that drained does not send a new key's tasks
        # behind the passes of keys served long ago.
        tx.run(
            "INSERT INTO fairness_passes (namespace, task_queue, kind, priority, "
            "fairness_key, pass) VALUES (?, ?, ?, ?, '', ?) "
            "ON CONFLICT (namespace, task_queue, kind, priority, fairness_key) "
            "DO UPDATE SET pass = excluded.pass WHERE fairness_passes.pass < excluded.pass",
            (*params, int(queued)),
        )
    assigned = tx.value(
        "INSERT INTO fairness_passes (namespace, task_queue, kind, priority, fairness_key, "
        "pass) VALUES (?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (namespace, task_queue, kind, priority, fairness_key) DO UPDATE SET "
        "pass = CASE WHEN fairness_passes.pass + 1 > excluded.pass "
        "THEN fairness_passes.pass + 1 ELSE excluded.pass END RETURNING pass",
        (*params, key, floor),
    )
    return int(assigned)


def outranked_column(alias: str) -> str:
    """A SELECT/RETURNING column (``alias``: the activity task's table or alias): whether
    a queued activity of a more urgent priority waits on the task's queue. An eager claim
    of the task would jump it; the claim order says it goes first. One seek of
    ``tasks_ready``, inside a statement that runs anyway."""
    return (
        "EXISTS (SELECT 1 FROM tasks h WHERE h.namespace = "
        f"{alias}.namespace AND h.kind = 'activity' AND h.task_queue = {alias}.task_queue "
        f"AND h.state = 'queued' AND h.priority < {alias}.priority) AS outranked"
    )


def prioritize(
    tx: Tx, namespace: str, task_id: int, task_queue: str, fair: tuple[int, str | None]
) -> bool:
    """Gives a new activity task its run's priority, key and pass (only for a run with a
    priority or key set: the rest keep the columns' defaults, no statement more). Returns
    whether a more urgent activity is queued on its queue (``outranked_column``)."""
    priority, key = fair
    fair_pass = (
        0 if key is None else assign_pass(tx, namespace, task_queue, "activity", priority, key)
    )
    row = tx.one(
        "UPDATE tasks SET priority = ?, fairness_key = ?, fairness_pass = ? WHERE task_id = ? "
        f"RETURNING {outranked_column('tasks')}",
        (priority, key, fair_pass, task_id),
    )
    return bool(row is not None and row["outranked"])
