"""Versioned schema migrations: an ordered list, applied on open, recorded in
``schema_version``. Never edit a released migration; append a new one.

Invariants the queries and indexes rely on:
- ``tasks.due_ms`` is non-NULL exactly while the task is queued, leased or waiting
  (queued/waiting: when it becomes visible; leased: when the lease expires);
- ``tasks.queue_deadline_ms`` is non-NULL only while an activity is queued or waiting
  (its schedule_to_close / schedule_to_start deadline);
- at most one workflow task per run is queued, leased or waiting (a unique index).
"""

from __future__ import annotations

from dataclasses import dataclass

from durable_rpc.store._admission import admission_tables, concurrency_key_tables
from durable_rpc.store._budgets import budget_refill_columns, budget_tables
from durable_rpc.store._declared_signals import DECLARED_SIGNALS_MIGRATION
from durable_rpc.store._definition_fingerprints import FINGERPRINT_ALGORITHM_MIGRATION
from durable_rpc.store._fairness import migration as fairness_migration
from durable_rpc.store._ops_secrets import secret_tables
from durable_rpc.store._payloads import payload_tables, upload_scoping_migration
from durable_rpc.store._queue_limits import task_queue_limits_table
from durable_rpc.store._rate_limits import rate_limits_table
from durable_rpc.store._schedule_buffer import schedule_buffer_table
from durable_rpc.store._sessions import session_tables
from durable_rpc.store._streams import stream_tables

#: The database clock in integer milliseconds since the epoch (SQLite).
SQLITE_NOW_MS = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


_SQLITE_V1 = (
    """CREATE TABLE namespaces (
        name TEXT PRIMARY KEY,
        created_at_ms INTEGER NOT NULL
    )""",
    f"INSERT INTO namespaces (name, created_at_ms) VALUES ('default', {SQLITE_NOW_MS})",
    """CREATE TABLE runs (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        workflow_id TEXT NOT NULL,
        workflow_type TEXT NOT NULL,
        workflow_version TEXT NOT NULL,
        task_queue TEXT NOT NULL,
        status TEXT NOT NULL,
        start_time_ms INTEGER NOT NULL,
        close_time_ms INTEGER,
        history_length INTEGER NOT NULL DEFAULT 0,
        definition_fingerprint TEXT NOT NULL DEFAULT '',
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        wft_attempt INTEGER NOT NULL DEFAULT 1,
        last_wft_failure BLOB,
        result BLOB,
        failure BLOB
    )""",
    "CREATE UNIQUE INDEX runs_by_run_id ON runs (namespace, run_id)",
    "CREATE UNIQUE INDEX runs_open_workflow_id ON runs (namespace, workflow_id) "
    "WHERE status = 'running'",
    "CREATE INDEX runs_by_workflow_id ON runs (namespace, workflow_id, id)",
    "CREATE INDEX runs_by_status ON runs (namespace, status, id)",
    "CREATE INDEX runs_by_type ON runs (namespace, workflow_type, id)",
    "CREATE INDEX runs_by_start_time ON runs (namespace, start_time_ms)",
    """CREATE TABLE start_requests (
        namespace TEXT NOT NULL,
        workflow_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        PRIMARY KEY (namespace, workflow_id, request_id)
    )""",
    """CREATE TABLE signal_requests (
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        created_at_ms INTEGER NOT NULL,
        PRIMARY KEY (namespace, run_id, request_id)
    )""",
    """CREATE TABLE history (
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        event_id INTEGER NOT NULL,
        kind TEXT NOT NULL,
        event_time_ms INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (namespace, run_id, event_id)
    )""",
    """CREATE TABLE tasks (
        task_id INTEGER PRIMARY KEY AUTOINCREMENT,
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('workflow', 'activity', 'timer')),
        task_queue TEXT NOT NULL,
        state TEXT NOT NULL
            CHECK (state IN ('queued', 'leased', 'waiting', 'completed', 'failed', 'cancelled')),
        visible_at_ms INTEGER NOT NULL,
        due_ms INTEGER,
        expires_at_ms INTEGER,
        claimed_at_ms INTEGER,
        fencing_token INTEGER NOT NULL DEFAULT 0,
        worker_id TEXT,
        attempt INTEGER NOT NULL DEFAULT 1,
        outcome_token INTEGER,
        outcome_kind TEXT,
        seq INTEGER,
        activity_type TEXT,
        input BLOB,
        options BLOB,
        lease_ms INTEGER,
        start_to_close_ms INTEGER,
        attempt_deadline_ms INTEGER,
        schedule_to_close_deadline_ms INTEGER,
        queue_deadline_ms INTEGER,
        heartbeat_details BLOB,
        last_failure BLOB,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at_ms INTEGER NOT NULL
    )""",
    # Claims: the best visible task of a (namespace, kind, queue).
    "CREATE INDEX tasks_claim ON tasks (namespace, kind, task_queue, due_ms) "
    "WHERE due_ms IS NOT NULL",
    # process_due: due timers, ended backoffs, expired leases.
    "CREATE INDEX tasks_due ON tasks (kind, state, due_ms) WHERE due_ms IS NOT NULL",
    # next_due_ms.
    "CREATE INDEX tasks_next_due ON tasks (due_ms) WHERE state IN ('waiting', 'leased')",
    "CREATE INDEX tasks_queue_deadline ON tasks (queue_deadline_ms) "
    "WHERE queue_deadline_ms IS NOT NULL",
    # A run's tasks (pending activities, closing a run, the run's workflow task).
    "CREATE INDEX tasks_by_run ON tasks (namespace, run_id, kind, state)",
    "CREATE UNIQUE INDEX tasks_run_seq ON tasks (namespace, run_id, seq) WHERE seq IS NOT NULL",
    "CREATE UNIQUE INDEX tasks_one_workflow_task ON tasks (namespace, run_id) "
    "WHERE kind = 'workflow' AND state IN ('queued', 'leased', 'waiting')",
    """CREATE TABLE workers (
        namespace TEXT NOT NULL,
        worker_id TEXT NOT NULL,
        task_queue TEXT NOT NULL,
        build_id TEXT NOT NULL,
        activities TEXT NOT NULL,
        registered_at_ms INTEGER NOT NULL,
        last_heartbeat_ms INTEGER NOT NULL,
        PRIMARY KEY (namespace, worker_id)
    )""",
    """CREATE TABLE definitions (
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        registered_at_ms INTEGER NOT NULL,
        PRIMARY KEY (namespace, name, version)
    )""",
    """CREATE TABLE worker_definitions (
        namespace TEXT NOT NULL,
        worker_id TEXT NOT NULL,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        PRIMARY KEY (namespace, worker_id, name, version)
    )""",
    "CREATE INDEX worker_definitions_by_definition "
    "ON worker_definitions (namespace, name, version)",
)


def _v2(blob: str, bigint: str, double: str) -> tuple[str, ...]:
    """Memo, search attributes and workflow timeouts (same shape on both backends).

    ``runs.deadline_ms`` is the earlier of the execution and run timeout deadlines while
    the run is open (NULL otherwise): ``process_due`` finds expired runs through the
    partial index ``runs_deadline``. A search attribute is one row per (run, name), its
    value in the column of its type: keyword/text in ``str_value``; int, bool (0/1) and
    datetime (ms since the epoch) in ``int_value``; double in ``double_value``.
    """
    return (
        f"ALTER TABLE runs ADD COLUMN memo {blob}",
        f"ALTER TABLE runs ADD COLUMN deadline_ms {bigint}",
        "ALTER TABLE runs ADD COLUMN timeout_kind TEXT",
        "CREATE INDEX runs_deadline ON runs (deadline_ms) WHERE deadline_ms IS NOT NULL",
        f"""CREATE TABLE search_attributes (
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            type TEXT NOT NULL
                CHECK (type IN ('keyword', 'text', 'int', 'double', 'bool', 'datetime')),
            str_value TEXT,
            int_value {bigint},
            double_value {double},
            PRIMARY KEY (namespace, run_id, name)
        )""",
        "CREATE INDEX search_attributes_str ON search_attributes "
        "(namespace, name, str_value) WHERE str_value IS NOT NULL",
        "CREATE INDEX search_attributes_int ON search_attributes "
        "(namespace, name, int_value) WHERE int_value IS NOT NULL",
        "CREATE INDEX search_attributes_double ON search_attributes "
        "(namespace, name, double_value) WHERE double_value IS NOT NULL",
    )


def _v3(bigint: str) -> tuple[str, ...]:
    """Child workflows (same shape on both backends): a child run records its parent
    run (same namespace), the seq of the parent's StartChildWorkflow command and the
    parent-close policy. A child that continues-as-new passes them on to the new run.
    ``runs_children`` finds a closing parent's open children."""
    return (
        "ALTER TABLE runs ADD COLUMN parent_run_id TEXT",
        f"ALTER TABLE runs ADD COLUMN parent_seq {bigint}",
        "ALTER TABLE runs ADD COLUMN parent_close_policy TEXT",
        "CREATE INDEX runs_children ON runs (namespace, parent_run_id, status) "
        "WHERE parent_run_id IS NOT NULL",
    )


def _v4(blob: str, bigint: str) -> tuple[str, ...]:
    """Queries in flight (same shape on both backends), so that a query asked on one
    server replica reaches a worker polling another. A row lives from QueryWorkflow until
    its caller has the answer or gives up; ``expires_at_ms`` bounds the life of a row
    whose caller died. ``task`` is the serialized PollQueryTaskResponse, ``answer`` the
    serialized RespondQueryTaskRequest."""
    return (
        f"""CREATE TABLE queries (
            query_id TEXT PRIMARY KEY,
            namespace TEXT NOT NULL,
            task_queue TEXT NOT NULL,
            workflow_type TEXT NOT NULL,
            workflow_version TEXT NOT NULL,
            task {blob} NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('queued', 'taken', 'answered')),
            answer {blob},
            created_at_ms {bigint} NOT NULL,
            expires_at_ms {bigint} NOT NULL
        )""",
        "CREATE INDEX queries_queued ON queries (namespace, task_queue, created_at_ms) "
        "WHERE state = 'queued'",
        "CREATE INDEX queries_expiry ON queries (expires_at_ms)",
    )


def _v5(blob: str, bigint: str) -> tuple[str, ...]:
    """Update requests waiting for a workflow task to accept or reject them (same shape on
    both backends), so that any replica can hand them out with a run's workflow task. A
    rejected request is kept a day to answer a repeated update id the same way.
    ``runs.pending_updates`` counts a run's pending rows: the claim and the inline-task
    check read it with the run row they read anyway."""
    return (
        f"""CREATE TABLE update_requests (
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            update_id TEXT NOT NULL,
            update_name TEXT NOT NULL,
            input {blob} NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'rejected')),
            failure {blob},
            created_at_ms {bigint} NOT NULL,
            PRIMARY KEY (namespace, run_id, update_id)
        )""",
        "CREATE INDEX update_requests_rejected ON update_requests (created_at_ms) "
        "WHERE state = 'rejected'",
        "ALTER TABLE runs ADD COLUMN pending_updates INTEGER NOT NULL DEFAULT 0",
    )


def _v6() -> tuple[str, ...]:
    """The trace context an activity was scheduled with (JSON object; NULL = none), handed
    to every attempt of it so its spans join the run's trace."""
    return ("ALTER TABLE tasks ADD COLUMN trace_context TEXT",)


def _v7(bigint: str) -> tuple[str, ...]:
    """A run's history size in bytes (the sum of its events' serialized sizes) beside its
    length, kept by every append, so the history limits are checked from the run row
    alone; existing runs are measured once."""
    return (
        f"ALTER TABLE runs ADD COLUMN history_size_bytes {bigint} NOT NULL DEFAULT 0",
        "UPDATE runs SET history_size_bytes = COALESCE((SELECT SUM(length(h.data)) "
        "FROM history h WHERE h.namespace = runs.namespace AND h.run_id = runs.run_id), 0)",
    )


def _v8(activity_names: str) -> tuple[str, ...]:
    """What a claim filters on, as rows of the claiming worker and of the task.

    The run's definition (name, version) on its workflow task rows, so a claim filters on
    the worker's registered definitions from the task row and ``worker_definitions``
    alone (no probe of ``runs`` per candidate task: see ``_ops_leases.SERVED_BY_WORKER``);
    NULL on other kinds, open workflow tasks backfilled. ``worker_activities``: the
    activity types a worker registered (so far only the JSON list ``workers.activities``),
    filled from that list; ``activity_names`` is the backend's set-returning function of
    the names in ``w.activities`` (a column ``value``)."""
    definition = (
        "(SELECT r.{0} FROM runs r WHERE r.namespace = tasks.namespace AND r.run_id = tasks.run_id)"
    )
    return (
        "ALTER TABLE tasks ADD COLUMN workflow_type TEXT",
        "ALTER TABLE tasks ADD COLUMN workflow_version TEXT",
        f"UPDATE tasks SET workflow_type = {definition.format('workflow_type')}, "
        f"workflow_version = {definition.format('workflow_version')} "
        "WHERE kind = 'workflow' AND state IN ('queued', 'leased', 'waiting')",
        """CREATE TABLE worker_activities (
            namespace TEXT NOT NULL,
            worker_id TEXT NOT NULL,
            activity_type TEXT NOT NULL,
            PRIMARY KEY (namespace, worker_id, activity_type)
        )""",
        "INSERT INTO worker_activities (namespace, worker_id, activity_type) "
        f"SELECT DISTINCT w.namespace, w.worker_id, a.value FROM workers w, {activity_names} a",
    )


#: What migration 9 gave every namespace (never enforced before migration 11).
_V9_DEFAULT_RETENTION_MS = 3 * 24 * 3600 * 1000

#: A namespace keeps closed runs this long unless told otherwise.
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


def _v9(bigint: str) -> tuple[str, ...]:
    """Namespaces gain a description and a retention; the API keys table
    (the secret's hash only; namespace NULL = every namespace)."""
    return (
        "ALTER TABLE namespaces ADD COLUMN description TEXT NOT NULL DEFAULT ''",
        f"ALTER TABLE namespaces ADD COLUMN retention_ms {bigint} NOT NULL "
        f"DEFAULT {_V9_DEFAULT_RETENTION_MS}",
        f"""CREATE TABLE api_keys (
            key_id TEXT PRIMARY KEY,
            secret_hash TEXT NOT NULL,
            role TEXT NOT NULL,
            namespace TEXT,
            name TEXT NOT NULL DEFAULT '',
            created_at_ms {bigint} NOT NULL,
            expires_at_ms {bigint},
            revoked_at_ms {bigint}
        )""",
        "CREATE INDEX api_keys_by_namespace ON api_keys (namespace, created_at_ms)",
    )


def _v11(bigint: str) -> tuple[str, ...]:
    """Operating the fleet (same shape on both backends).

    - ``workers``: the counters a worker reports with each heartbeat (ListWorkers).
    - ``definitions.removed_at_ms``: set by RemoveDefinition; registration of a removed
      definition is refused until RestoreDefinition clears it.
    - ``runs.build_id``: the build a run is pinned to (NULL: unversioned), copied onto its
      workflow task rows (``tasks.build_id``) so a claim filters on the task row alone.
    - ``runs.redriven_from_run_id``: the failed run a redriven run continues.
    - ``runs_closed``: retention finds a namespace's oldest closed runs.
    - ``maintenance_leases``: one row per cluster-wide background job (retention), held
      by one replica at a time until ``expires_at_ms`` (database time).
    - Retention was stored but never enforced before this version: namespaces still on
      migration 9's default get the new default.
    """
    return (
        f"ALTER TABLE workers ADD COLUMN claims {bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE workers ADD COLUMN completions {bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE workers ADD COLUMN failures {bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE workers ADD COLUMN lease_losses {bigint} NOT NULL DEFAULT 0",
        "ALTER TABLE workers ADD COLUMN slots_in_use INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE workers ADD COLUMN slots_total INTEGER NOT NULL DEFAULT 0",
        f"ALTER TABLE definitions ADD COLUMN removed_at_ms {bigint}",
        "ALTER TABLE runs ADD COLUMN build_id TEXT",
        "ALTER TABLE tasks ADD COLUMN build_id TEXT",
        "ALTER TABLE runs ADD COLUMN redriven_from_run_id TEXT",
        "CREATE INDEX runs_redriven_from ON runs (namespace, redriven_from_run_id) "
        "WHERE redriven_from_run_id IS NOT NULL",
        "CREATE INDEX runs_closed ON runs (namespace, close_time_ms) "
        "WHERE close_time_ms IS NOT NULL",
        f"""CREATE TABLE maintenance_leases (
            job TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            expires_at_ms {bigint} NOT NULL
        )""",
        f"UPDATE namespaces SET retention_ms = {DEFAULT_RETENTION_MS} "
        f"WHERE retention_ms = {_V9_DEFAULT_RETENTION_MS}",
    )


# Build-id pinning starts with this version: a run that exists already was decided
# before builds were used and stays unversioned ('' -- ``_build_pins``), instead of being
# pinned to whichever versioned worker decides it next.
V12_RUNS_STAY_UNVERSIONED = "UPDATE runs SET build_id = '' WHERE build_id IS NULL"


def _v13() -> tuple[str, ...]:
    """A query of a pinned run carries the run's build (NULL: any build may answer), so
    only a worker of that build replays it to answer, as only one decides it."""
    return ("ALTER TABLE queries ADD COLUMN build_id TEXT",)


def _v_schedules(blob: str, bigint: str) -> tuple[str, ...]:
    """Schedules (``_ops_schedules``): one row per schedule with its due slot
    (``fire_at_ms``: the due time plus jitter; NULL while paused), and its recent actions
    (kept per schedule, trimmed as new ones come: not per-run rows, so retention leaves
    them, and ``started_run_id`` is named so)."""
    return (
        f"""CREATE TABLE schedules (
            namespace TEXT NOT NULL,
            schedule_id TEXT NOT NULL,
            workflow_type TEXT NOT NULL,
            workflow_version TEXT NOT NULL,
            task_queue TEXT NOT NULL,
            input {blob} NOT NULL,
            spec TEXT NOT NULL,
            overlap TEXT NOT NULL,
            catchup_window_ms {bigint} NOT NULL,
            paused INTEGER NOT NULL,
            note TEXT NOT NULL,
            anchor_ms {bigint} NOT NULL,
            next_due_ms {bigint} NOT NULL,
            fire_at_ms {bigint},
            buffered_due_ms {bigint},
            last_workflow_id TEXT,
            last_run_id TEXT,
            created_at_ms {bigint} NOT NULL,
            PRIMARY KEY (namespace, schedule_id)
        )""",
        "CREATE INDEX schedules_by_fire_at ON schedules (fire_at_ms) WHERE fire_at_ms IS NOT NULL",
        f"""CREATE TABLE schedule_actions (
            namespace TEXT NOT NULL,
            schedule_id TEXT NOT NULL,
            due_ms {bigint} NOT NULL,
            action TEXT NOT NULL,
            workflow_id TEXT NOT NULL,
            started_run_id TEXT NOT NULL,
            at_ms {bigint} NOT NULL,
            PRIMARY KEY (namespace, schedule_id, due_ms, action)
        )""",
    )


SQLITE_MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _SQLITE_V1),
    Migration(2, "memo, search attributes, workflow timeouts", _v2("BLOB", "INTEGER", "REAL")),
    Migration(3, "child workflows", _v3("INTEGER")),
    Migration(4, "queries across replicas", _v4("BLOB", "INTEGER")),
    Migration(5, "update requests across replicas", _v5("BLOB", "INTEGER")),
    Migration(6, "activity trace context", _v6()),
    Migration(7, "history size of a run", _v7("INTEGER")),
    Migration(8, "what claims filter on", _v8("json_each(w.activities)")),
    Migration(9, "namespace settings and API keys", _v9("INTEGER")),
    # PostgreSQL's server-side functions of its hot path (``_pg_hot_sql``); SQLite runs
    # every operation in-process and needs none.
    Migration(10, "hot-path functions (PostgreSQL only)", ()),
    Migration(
        11, "fleet counters, definition removal, build pins, redrive, retention", _v11("INTEGER")
    ),
    Migration(12, "build pins of existing runs", (V12_RUNS_STAY_UNVERSIONED,)),
    Migration(13, "build pins of queries", _v13()),
    Migration(14, "schedules", _v_schedules("BLOB", "INTEGER")),
    Migration(15, "task-queue activity limits", task_queue_limits_table("INTEGER")),
    Migration(16, "schedule buffers (BUFFER_ALL, CANCEL_OTHER)", schedule_buffer_table("INTEGER")),
    Migration(17, "namespace admission", admission_tables("INTEGER", "REAL")),
    Migration(18, "budgets", budget_tables("INTEGER", "INTEGER PRIMARY KEY AUTOINCREMENT")),
    Migration(19, "concurrency keys", concurrency_key_tables()),
    Migration(20, "rate limits", rate_limits_table("INTEGER")),
    Migration(21, "large payloads by SHA-256", payload_tables("BLOB", "INTEGER")),
    Migration(22, "priority and fairness of claims", fairness_migration("INTEGER")),
    Migration(23, "declared signals of definitions", DECLARED_SIGNALS_MIGRATION),
    Migration(24, "budget refill rates", budget_refill_columns("INTEGER")),
    Migration(25, "worker sessions", session_tables("INTEGER", "BLOB")),
    Migration(26, "message streams", stream_tables("INTEGER", "BLOB")),
    Migration(27, "fingerprint algorithms of definitions", FINGERPRINT_ALGORITHM_MIGRATION),
    Migration(
        28,
        "payload uploads per uploader, payload quotas, server secrets",
        (*upload_scoping_migration("BLOB", "INTEGER"), *secret_tables("BLOB")),
    ),
)


def check_ordered(migrations: tuple[Migration, ...]) -> None:
    """Versions must be 1, 2, 3, ... in order."""
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise ValueError(f"migration #{expected} has version {migration.version}")
