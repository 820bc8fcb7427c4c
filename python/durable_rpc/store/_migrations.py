"""Versioned schema migrations: one ordered list, applied on open, recorded in
``schema_version``. Never edit a released migration; append a new one
(tests/store/test_migrations_list.py holds a fingerprint of every released one).

Each migration is declared once, its statements written in terms of a ``Dialect``
(``_dialects``: the types and expressions SQLite and PostgreSQL say differently), so one
version number names one logical schema on both backends. A migration's
``postgres_only`` statements are PostgreSQL's server-side functions of its hot path
(``_pg_hot_sql``; each version of a function one whole file, ``pg_functions/``), applied
after the shared ones; SQLite runs every operation in-process and needs none (its
migration 10 is empty).

Invariants the queries and indexes rely on:
- ``tasks.due_ms`` is non-NULL exactly while the task is queued, leased or waiting
  (queued/waiting: when it becomes visible; leased: when the lease expires);
- ``tasks.queue_deadline_ms`` is non-NULL only while an activity is queued or waiting
  (its schedule_to_close / schedule_to_start deadline);
- at most one workflow task per run is queued, leased or waiting (a unique index).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from durable_rpc.store._admission import admission_tables, concurrency_key_tables
from durable_rpc.store._budgets import budget_refill_columns, budget_tables
from durable_rpc.store._declared_signals import DECLARED_SIGNALS_MIGRATION
from durable_rpc.store._definition_fingerprints import FINGERPRINT_ALGORITHM_MIGRATION
from durable_rpc.store._dialects import POSTGRES, SQLITE, Dialect
from durable_rpc.store._fairness import fairness_schema
from durable_rpc.store._ops_secrets import secret_tables
from durable_rpc.store._payloads import payload_tables, upload_scoping_migration
from durable_rpc.store._pg_hot_sql import pg_functions
from durable_rpc.store._queue_limits import CLAIM_DEFERRED_MIGRATION, task_queue_limits_table
from durable_rpc.store._rate_limits import rate_limits_table
from durable_rpc.store._schedule_buffer import schedule_buffer_table
from durable_rpc.store._sessions import session_tables
from durable_rpc.store._streams import stream_tables

Statements = Callable[[Dialect], tuple[str, ...]]


def _nothing(dialect: Dialect) -> tuple[str, ...]:
    return ()


def _everywhere(*statements: str) -> Statements:
    """Statements whose text is the same in every dialect."""
    return lambda dialect: statements


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema version, declared for every dialect."""

    version: int
    name: str
    #: The statements of every dialect, written in terms of the dialect.
    schema: Statements = _nothing
    #: PostgreSQL's hot-path functions this version creates or replaces, by name: each
    #: the whole text of ``pg_functions/<name>.v<version>.sql``, applied after ``schema``.
    postgres_functions: tuple[str, ...] = ()
    #: Hot-path functions (name and argument types) dropped before those are created: a
    #: new version whose signature or result columns differ is a new function.
    postgres_dropped: tuple[str, ...] = ()

    @property
    def postgres_only(self) -> tuple[str, ...]:
        """The statements PostgreSQL applies after ``schema``."""
        drops = tuple(f"DROP FUNCTION {signature}" for signature in self.postgres_dropped)
        return drops + pg_functions(self.version, *self.postgres_functions)

    def in_dialect(self, dialect: Dialect) -> DialectMigration:
        statements = self.schema(dialect)
        if dialect is POSTGRES:
            statements += self.postgres_only
        return DialectMigration(self.version, self.name, statements)


@dataclass(frozen=True, slots=True)
class DialectMigration:
    """A migration as one dialect applies it."""

    version: int
    name: str
    statements: tuple[str, ...]


def _v1(d: Dialect) -> tuple[str, ...]:
    """The first schema. (Its statements keep the text they were released with, the
    indentation inside the strings included.)"""
    return (
        f"""CREATE TABLE namespaces (
        name TEXT PRIMARY KEY,
        created_at_ms {d.bigint} NOT NULL
    )""",
        f"INSERT INTO namespaces (name, created_at_ms) VALUES ('default', {d.now_ms})",
        f"""CREATE TABLE runs (
        id {d.identity},
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        workflow_id TEXT NOT NULL,
        workflow_type TEXT NOT NULL,
        workflow_version TEXT NOT NULL,
        task_queue TEXT NOT NULL,
        status TEXT NOT NULL,
        start_time_ms {d.bigint} NOT NULL,
        close_time_ms {d.bigint},
        history_length {d.bigint} NOT NULL DEFAULT 0,
        definition_fingerprint TEXT NOT NULL DEFAULT '',
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        wft_attempt INTEGER NOT NULL DEFAULT 1,
        last_wft_failure {d.blob},
        result {d.blob},
        failure {d.blob}
    ){d.hot_table_options}""",
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
        f"""CREATE TABLE signal_requests (
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        created_at_ms {d.bigint} NOT NULL,
        PRIMARY KEY (namespace, run_id, request_id)
    )""",
        f"""CREATE TABLE history (
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        event_id {d.bigint} NOT NULL,
        kind TEXT NOT NULL,
        event_time_ms {d.bigint} NOT NULL,
        data {d.blob} NOT NULL,
        PRIMARY KEY (namespace, run_id, event_id)
    )""",
        f"""CREATE TABLE tasks (
        task_id {d.identity},
        namespace TEXT NOT NULL,
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('workflow', 'activity', 'timer')),
        task_queue TEXT NOT NULL,
        state TEXT NOT NULL
            CHECK (state IN ('queued', 'leased', 'waiting', 'completed', 'failed', 'cancelled')),
        visible_at_ms {d.bigint} NOT NULL,
        due_ms {d.bigint},
        expires_at_ms {d.bigint},
        claimed_at_ms {d.bigint},
        fencing_token {d.bigint} NOT NULL DEFAULT 0,
        worker_id TEXT,
        attempt INTEGER NOT NULL DEFAULT 1,
        outcome_token {d.bigint},
        outcome_kind TEXT,
        seq {d.bigint},
        activity_type TEXT,
        input {d.blob},
        options {d.blob},
        lease_ms {d.bigint},
        start_to_close_ms {d.bigint},
        attempt_deadline_ms {d.bigint},
        schedule_to_close_deadline_ms {d.bigint},
        queue_deadline_ms {d.bigint},
        heartbeat_details {d.blob},
        last_failure {d.blob},
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at_ms {d.bigint} NOT NULL
    ){d.hot_table_options}""",
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
        f"""CREATE TABLE workers (
        namespace TEXT NOT NULL,
        worker_id TEXT NOT NULL,
        task_queue TEXT NOT NULL,
        build_id TEXT NOT NULL,
        activities TEXT NOT NULL,
        registered_at_ms {d.bigint} NOT NULL,
        last_heartbeat_ms {d.bigint} NOT NULL,
        PRIMARY KEY (namespace, worker_id)
    )""",
        f"""CREATE TABLE definitions (
        namespace TEXT NOT NULL,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        registered_at_ms {d.bigint} NOT NULL,
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


def _v2(d: Dialect) -> tuple[str, ...]:
    """Memo, search attributes and workflow timeouts (same shape on both backends).

    ``runs.deadline_ms`` is the earlier of the execution and run timeout deadlines while
    the run is open (NULL otherwise): ``process_due`` finds expired runs through the
    partial index ``runs_deadline``. A search attribute is one row per (run, name), its
    value in the column of its type: keyword/text in ``str_value``; int, bool (0/1) and
    datetime (ms since the epoch) in ``int_value``; double in ``double_value``.
    """
    return (
        f"ALTER TABLE runs ADD COLUMN memo {d.blob}",
        f"ALTER TABLE runs ADD COLUMN deadline_ms {d.bigint}",
        "ALTER TABLE runs ADD COLUMN timeout_kind TEXT",
        "CREATE INDEX runs_deadline ON runs (deadline_ms) WHERE deadline_ms IS NOT NULL",
        f"""CREATE TABLE search_attributes (
            namespace TEXT NOT NULL,
            run_id TEXT NOT NULL,
            name TEXT NOT NULL,
            type TEXT NOT NULL
                CHECK (type IN ('keyword', 'text', 'int', 'double', 'bool', 'datetime')),
            str_value TEXT,
            int_value {d.bigint},
            double_value {d.double},
            PRIMARY KEY (namespace, run_id, name)
        )""",
        "CREATE INDEX search_attributes_str ON search_attributes "
        "(namespace, name, str_value) WHERE str_value IS NOT NULL",
        "CREATE INDEX search_attributes_int ON search_attributes "
        "(namespace, name, int_value) WHERE int_value IS NOT NULL",
        "CREATE INDEX search_attributes_double ON search_attributes "
        "(namespace, name, double_value) WHERE double_value IS NOT NULL",
    )


def _v3(d: Dialect) -> tuple[str, ...]:
    """Child workflows (same shape on both backends): a child run records its parent
    run (same namespace), the seq of the parent's StartChildWorkflow command and the
    parent-close policy. A child that continues-as-new passes them on to the new run.
    ``runs_children`` finds a closing parent's open children."""
    return (
        "ALTER TABLE runs ADD COLUMN parent_run_id TEXT",
        f"ALTER TABLE runs ADD COLUMN parent_seq {d.bigint}",
        "ALTER TABLE runs ADD COLUMN parent_close_policy TEXT",
        "CREATE INDEX runs_children ON runs (namespace, parent_run_id, status) "
        "WHERE parent_run_id IS NOT NULL",
    )


def _v4(d: Dialect) -> tuple[str, ...]:
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
            task {d.blob} NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('queued', 'taken', 'answered')),
            answer {d.blob},
            created_at_ms {d.bigint} NOT NULL,
            expires_at_ms {d.bigint} NOT NULL
        )""",
        "CREATE INDEX queries_queued ON queries (namespace, task_queue, created_at_ms) "
        "WHERE state = 'queued'",
        "CREATE INDEX queries_expiry ON queries (expires_at_ms)",
    )


def _v5(d: Dialect) -> tuple[str, ...]:
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
            input {d.blob} NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('pending', 'rejected')),
            failure {d.blob},
            created_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, run_id, update_id)
        )""",
        "CREATE INDEX update_requests_rejected ON update_requests (created_at_ms) "
        "WHERE state = 'rejected'",
        "ALTER TABLE runs ADD COLUMN pending_updates INTEGER NOT NULL DEFAULT 0",
    )


def _v6(d: Dialect) -> tuple[str, ...]:
    """The trace context an activity was scheduled with (JSON object; NULL = none), handed
    to every attempt of it so its spans join the run's trace."""
    return ("ALTER TABLE tasks ADD COLUMN trace_context TEXT",)


def _v7(d: Dialect) -> tuple[str, ...]:
    """A run's history size in bytes (the sum of its events' serialized sizes) beside its
    length, kept by every append, so the history limits are checked from the run row
    alone; existing runs are measured once."""
    return (
        f"ALTER TABLE runs ADD COLUMN history_size_bytes {d.bigint} NOT NULL DEFAULT 0",
        "UPDATE runs SET history_size_bytes = COALESCE((SELECT SUM(length(h.data)) "
        "FROM history h WHERE h.namespace = runs.namespace AND h.run_id = runs.run_id), 0)",
    )


def _v8(d: Dialect) -> tuple[str, ...]:
    """What a claim filters on, as rows of the claiming worker and of the task.

    The run's definition (name, version) on its workflow task rows, so a claim filters on
    the worker's registered definitions from the task row and ``worker_definitions``
    alone (no probe of ``runs`` per candidate task: see ``_ops_leases.SERVED_BY_WORKER``);
    NULL on other kinds, open workflow tasks backfilled. ``worker_activities``: the
    activity types a worker registered (so far only the JSON list ``workers.activities``),
    filled from that list by the dialect's rows of a JSON array (``json_values_of``)."""
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
        "SELECT DISTINCT w.namespace, w.worker_id, a.value "
        f"FROM workers w, {d.json_values_of('w.activities')} a",
    )


#: What migration 9 gave every namespace (never enforced before migration 11).
_V9_DEFAULT_RETENTION_MS = 3 * 24 * 3600 * 1000

#: A namespace keeps closed runs this long unless told otherwise.
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


def _v9(d: Dialect) -> tuple[str, ...]:
    """Namespaces gain a description and a retention; the API keys table
    (the secret's hash only; namespace NULL = every namespace)."""
    return (
        "ALTER TABLE namespaces ADD COLUMN description TEXT NOT NULL DEFAULT ''",
        f"ALTER TABLE namespaces ADD COLUMN retention_ms {d.bigint} NOT NULL "
        f"DEFAULT {_V9_DEFAULT_RETENTION_MS}",
        f"""CREATE TABLE api_keys (
            key_id TEXT PRIMARY KEY,
            secret_hash TEXT NOT NULL,
            role TEXT NOT NULL,
            namespace TEXT,
            name TEXT NOT NULL DEFAULT '',
            created_at_ms {d.bigint} NOT NULL,
            expires_at_ms {d.bigint},
            revoked_at_ms {d.bigint}
        )""",
        "CREATE INDEX api_keys_by_namespace ON api_keys (namespace, created_at_ms)",
    )


def _v11(d: Dialect) -> tuple[str, ...]:
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
        f"ALTER TABLE workers ADD COLUMN claims {d.bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE workers ADD COLUMN completions {d.bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE workers ADD COLUMN failures {d.bigint} NOT NULL DEFAULT 0",
        f"ALTER TABLE workers ADD COLUMN lease_losses {d.bigint} NOT NULL DEFAULT 0",
        "ALTER TABLE workers ADD COLUMN slots_in_use INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE workers ADD COLUMN slots_total INTEGER NOT NULL DEFAULT 0",
        f"ALTER TABLE definitions ADD COLUMN removed_at_ms {d.bigint}",
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
            expires_at_ms {d.bigint} NOT NULL
        )""",
        f"UPDATE namespaces SET retention_ms = {DEFAULT_RETENTION_MS} "
        f"WHERE retention_ms = {_V9_DEFAULT_RETENTION_MS}",
    )


# Build-id pinning starts with this version: a run that exists already was decided
# before builds were used and stays unversioned ('' -- ``_build_pins``), instead of being
# pinned to whichever versioned worker decides it next.
V12_RUNS_STAY_UNVERSIONED = "UPDATE runs SET build_id = '' WHERE build_id IS NULL"


def _v13(d: Dialect) -> tuple[str, ...]:
    """A query of a pinned run carries the run's build (NULL: any build may answer), so
    only a worker of that build replays it to answer, as only one decides it."""
    return ("ALTER TABLE queries ADD COLUMN build_id TEXT",)


def _v14(d: Dialect) -> tuple[str, ...]:
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
            input {d.blob} NOT NULL,
            spec TEXT NOT NULL,
            overlap TEXT NOT NULL,
            catchup_window_ms {d.bigint} NOT NULL,
            paused INTEGER NOT NULL,
            note TEXT NOT NULL,
            anchor_ms {d.bigint} NOT NULL,
            next_due_ms {d.bigint} NOT NULL,
            fire_at_ms {d.bigint},
            buffered_due_ms {d.bigint},
            last_workflow_id TEXT,
            last_run_id TEXT,
            created_at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, schedule_id)
        )""",
        "CREATE INDEX schedules_by_fire_at ON schedules (fire_at_ms) WHERE fire_at_ms IS NOT NULL",
        f"""CREATE TABLE schedule_actions (
            namespace TEXT NOT NULL,
            schedule_id TEXT NOT NULL,
            due_ms {d.bigint} NOT NULL,
            action TEXT NOT NULL,
            workflow_id TEXT NOT NULL,
            started_run_id TEXT NOT NULL,
            at_ms {d.bigint} NOT NULL,
            PRIMARY KEY (namespace, schedule_id, due_ms, action)
        )""",
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _v1),
    Migration(2, "memo, search attributes, workflow timeouts", _v2),
    Migration(3, "child workflows", _v3),
    Migration(4, "queries across replicas", _v4),
    Migration(5, "update requests across replicas", _v5),
    Migration(6, "activity trace context", _v6),
    Migration(7, "history size of a run", _v7),
    Migration(8, "what claims filter on", _v8),
    Migration(9, "namespace settings and API keys", _v9),
    Migration(
        10,
        "hot-path functions",
        postgres_functions=(
            "drpc_pb_varint",
            "drpc_pb_int",
            "drpc_pb_len",
            "drpc_pb_timestamp",
            "drpc_pb_event",
            "drpc_record_decision",
            "drpc_start_workflow",
        ),
    ),
    Migration(11, "fleet counters, definition removal, build pins, redrive, retention", _v11),
    Migration(
        12,
        "build pins of existing runs and in the hot path",
        _everywhere(V12_RUNS_STAY_UNVERSIONED),
        postgres_functions=("drpc_record_decision", "drpc_start_workflow"),
    ),
    Migration(13, "build pins of queries", _v13),
    Migration(14, "schedules", _v14),
    Migration(
        15,
        "task-queue activity limits",
        task_queue_limits_table,
        postgres_functions=("drpc_record_decision",),
    ),
    Migration(16, "schedule buffers (BUFFER_ALL, CANCEL_OTHER)", schedule_buffer_table),
    Migration(
        17,
        "namespace admission",
        admission_tables,
        postgres_functions=("drpc_record_decision", "drpc_start_workflow"),
    ),
    Migration(18, "budgets", budget_tables, postgres_functions=("drpc_record_decision",)),
    Migration(19, "concurrency keys", _everywhere(*concurrency_key_tables())),
    Migration(20, "rate limits", rate_limits_table, postgres_functions=("drpc_record_decision",)),
    Migration(21, "large payloads by SHA-256", payload_tables),
    Migration(
        22,
        "priority and fairness of claims",
        fairness_schema,
        postgres_functions=("drpc_record_decision",),
    ),
    Migration(23, "declared signals of definitions", _everywhere(*DECLARED_SIGNALS_MIGRATION)),
    Migration(24, "budget refill rates", budget_refill_columns),
    Migration(25, "worker sessions", session_tables),
    Migration(26, "message streams", stream_tables),
    Migration(
        27,
        "fingerprint algorithms of definitions",
        _everywhere(*FINGERPRINT_ALGORITHM_MIGRATION),
    ),
    Migration(
        28,
        "payload uploads per uploader, payload quotas, server secrets",
        lambda d: (*upload_scoping_migration(d), *secret_tables(d)),
    ),
    Migration(
        29,
        "the hot-path decision and start in fewer statements",
        postgres_functions=("drpc_record_decision", "drpc_start_workflow"),
    ),
    Migration(
        30,
        "flow control that does not bind in the hot path",
        _everywhere(*CLAIM_DEFERRED_MIGRATION),
        postgres_functions=("drpc_record_decision", "drpc_start_workflow"),
        # Version 30 of the decision returns more columns, which CREATE OR REPLACE cannot
        # change.
        postgres_dropped=(
            "drpc_record_decision(text, text, bigint, text, bigint, bytea, bytea, text, "
            "text, bigint, bytea, bigint[], text[], text[], bytea[], bytea[], bytea[], "
            "bigint[], bigint[], bigint[], bigint[], text[], boolean[], bytea, bytea, "
            "bigint, bigint, text, text)",
        ),
    ),
)


def in_dialect(dialect: Dialect) -> tuple[DialectMigration, ...]:
    """The migrations as ``dialect`` applies them, in order."""
    return tuple(migration.in_dialect(dialect) for migration in MIGRATIONS)


SQLITE_MIGRATIONS = in_dialect(SQLITE)
PG_MIGRATIONS = in_dialect(POSTGRES)


def check_ordered(migrations: tuple[DialectMigration, ...]) -> None:
    """Versions must be 1, 2, 3, ... in order."""
    for expected, migration in enumerate(migrations, start=1):
        if migration.version != expected:
            raise ValueError(f"migration #{expected} has version {migration.version}")
