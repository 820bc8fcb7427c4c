"""Every row a run left in any table, found from the schema the database reports (so a
table added later is covered, or must be declared as holding no run's rows)."""

from __future__ import annotations

from durable_rpc.store import Store

#: Tables that hold no row of a run (every other table must have a run_id column, so a
#: table added later is either checked here or listed, never forgotten).
NOT_PER_RUN = {
    "namespaces",
    "workers",
    "definitions",
    "worker_definitions",
    "worker_activities",
    # A worker's session capabilities (RegisterWorkerSessions): a worker's row, deleted
    # with the worker (WORKER_TABLES).
    "worker_session_config",
    "api_keys",
    "maintenance_leases",
    "schema_version",
    # Configuration of a namespace's task queues, set and removed by operators.
    "task_queue_limits",
    # A namespace's rate limits (their token buckets), set and removed by operators.
    "rate_limits",
    # A namespace's admission policy (its limit, rate and token bucket), set by operators.
    "namespace_admission",
    # A namespace's budgets (workflow.reserve()), set and removed by operators; their
    # reservations (budget_reservations) are per-run and go when the run closes.
    "budgets",
    # A task queue's claim passes, one row per (queue, kind, priority, fairness key) that
    # was used and the queue's floor (store/_fairness.py): not a run's, one per key.
    "fairness_passes",
    # Transient: each row expires by its own expires_at_ms (process_due deletes it).
    "queries",
    # A schedule's rows outlive its runs: deleted with the schedule; actions are trimmed
    # to the most recent ones as new ones come (store/_ops_schedules.py).
    "schedules",
    "schedule_actions",
    # A schedule's waiting due times: taken out as they start, deleted with the schedule.
    "schedule_buffer",
    # Payloads by SHA-256, shared by the runs whose history references them (their
    # payload_refs rows are per-run): retention deletes one no ref holds after its grace.
    "payload_blobs",
    "payload_chunks",
    # An upload in progress, its uploader's: it becomes a payload_blobs row when verified,
    # and retention deletes an unfinished one after its grace.
    "payload_uploads",
    # The server's own signing secrets, shared by every replica on the database.
    "server_secrets",
}


async def run_columns(store: Store, postgres: bool) -> dict[str, list[str]]:
    """Every table of the schema and its columns, read from the database itself."""

    def op(tx: object) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        if postgres:
            rows = tx.all(  # type: ignore[attr-defined]
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
            )
            for row in rows:
                out.setdefault(row["table_name"], []).append(row["column_name"])
            return out
        tables = tx.all(  # type: ignore[attr-defined]
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
        for table in tables:
            columns = tx.all(f"PRAGMA table_info({table['name']})")  # type: ignore[attr-defined]
            out[table["name"]] = [c["name"] for c in columns]
        return out

    return await store._read(op)  # type: ignore[attr-defined]


async def rows_of(store: Store, postgres: bool, run_ids: list[str]) -> dict[str, int]:
    """How many rows of ``run_ids`` each table holds (only tables that hold any)."""
    schema = await run_columns(store, postgres)
    unclassified = {t for t, cols in schema.items() if "run_id" not in cols} - NOT_PER_RUN
    assert not unclassified, f"tables neither per-run nor listed as such: {unclassified}"
    marks = ", ".join("?" for _ in run_ids)

    def op(tx: object) -> dict[str, int]:
        found: dict[str, int] = {}
        for table, columns in schema.items():
            if "run_id" not in columns:
                continue
            count = tx.value(  # type: ignore[attr-defined]
                f"SELECT COUNT(*) AS n FROM {table} WHERE run_id IN ({marks})", run_ids
            )
            if count:
                found[table] = int(count)
        return found

    return await store._read(op)  # type: ignore[attr-defined]
