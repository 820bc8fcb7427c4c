"""The hello workload's database work alone, on the store's real PostgreSQL schema.

What is the most workflows/s this machine's PostgreSQL can carry if the server, worker
and client cost nothing? The script runs only the database side of each workflow of
``e2e_bench`` — the store's own tables and indexes (migrated by ``PostgresStore``) — with
eight workflows in flight until both cores are busy, three ways:

- ``store``: the store's own operations, called as the server calls them (no gRPC);
- ``statements``: the same row writes as the store's statements, sent as the store sends
  them (``BEGIN`` with the clock, a round trip per statement, ``COMMIT`` with the
  ``NOTIFY`` when it has one) from a bare driver: what the database work costs without
  the store's Python around it;
- ``function``: each operation as one autocommitted call of a PL/pgSQL function holding
  those statements (the one-call plan of docs/scale-out.md, at its best: the server has
  nothing left to compute between them).

A workflow is six operations: start (run, start request, two events, workflow task),
workflow-task claim (lease, attempt, history read), its completion (fence, run lock, two
checks, queue and lease the first activity, three events), the first activity's completion
with the next decision (the same shape), the second's with the closing decision (fence,
run lock, three events, close, cancel leftovers), and the result read.

It prints throughput and CPU per workflow: this process (the store or the driver: work a
server would do) and every PostgreSQL process (from /proc: the cluster must run here).

    python bench/pg_ceiling.py [--pg-url URL] [--workflows 3000] [--threads 8] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import _checkout  # noqa: F401  (first: makes durable_rpc this checkout's code)
import psycopg
from _proc import postgres_cpu_s
from bench_stores import database

from durable_rpc.store import EagerActivities, InlineWorkflowTask, Store, open_store
from durable_rpc.v1 import options_pb2, payload_pb2, workflow_task_pb2

NOW = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint"
NS = "'default'"
OPEN = "('queued', 'leased', 'waiting')"


@dataclass(frozen=True)
class Step:
    """One statement of an operation: ``{name}`` is a parameter or an earlier output."""

    sql: str
    outputs: tuple[str, ...] = ()  # columns read into names; the row must exist


@dataclass(frozen=True)
class Operation:
    name: str
    params: tuple[tuple[str, str], ...]  # (name, SQL type)
    steps: tuple[Step, ...]
    #: The rows the operation answers (its last statement, in the same transaction), and
    #: their columns as a call of the function declares them; None: it answers nothing.
    result: str | None = None
    columns: str = "(nothing boolean)"
    notify: bool = False


APPEND_3 = Step(
    "WITH grown AS (UPDATE runs SET history_length = {length} + 3 WHERE namespace = " + NS + " "
    "AND run_id = {run}) INSERT INTO history (namespace, run_id, event_id, kind, event_time_ms, "
    "data) VALUES (" + NS + ", {run}, {length} + 1, 'a', {now}, {event}), "
    "(" + NS + ", {run}, {length} + 2, 'b', {now}, {event}), "
    "(" + NS + ", {run}, {length} + 3, 'c', {now}, {event})"
)
LOCK_RUN = Step(
    "SELECT history_length FROM runs WHERE namespace = " + NS + " AND run_id = {run} FOR UPDATE",
    ("length",),
)


def fence(kind: str, returning: str, outputs: tuple[str, ...]) -> Step:
    return Step(
        "UPDATE tasks SET state = 'completed', due_ms = NULL, outcome_token = fencing_token, "
        "outcome_kind = 'completed' WHERE task_id = {task} AND namespace = " + NS + " AND "
        f"kind = '{kind}' AND state = 'leased' AND worker_id = {{worker}} AND "
        "fencing_token = {token} AND expires_at_ms > {now} RETURNING " + returning,
        outputs,
    )


# Schedule the activity with sequence number {seq} and lease it to {worker} (eager dispatch).
SCHEDULE = (
    Step("SELECT seq FROM tasks WHERE namespace = " + NS + " AND run_id = {run} AND seq = {seq}"),
    Step(
        "SELECT 1 FROM tasks WHERE namespace = " + NS + " AND run_id = {run} "
        f"AND kind = 'workflow' AND state IN {OPEN} LIMIT 1"
    ),
    Step(
        "INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, due_ms, "
        "attempt, fencing_token, seq, activity_type, input, options, lease_ms, "
        "start_to_close_ms, created_at_ms) VALUES (" + NS + ", {run}, 'activity', {queue}, "
        "'queued', {now}, {now}, 1, 0, {seq}, 'say_hello', {event}, {event}, 30000, 30000, "
        "{now}) RETURNING task_id",
        ("next_task",),
    ),
    Step(
        "UPDATE tasks SET state = 'leased', worker_id = {worker}, "
        "fencing_token = fencing_token + 1, claimed_at_ms = {now}, "
        "expires_at_ms = {now} + 30000, due_ms = {now} + 30000, "
        "attempt_deadline_ms = {now} + 30000, queue_deadline_ms = NULL, outcome_token = NULL, "
        "outcome_kind = NULL WHERE task_id = {next_task} AND state IN ('queued', 'waiting') "
        "RETURNING fencing_token",
        ("next_token",),
    ),
    APPEND_3,
)

TEXT, BIGINT, BYTEA = "text", "bigint", "bytea"
NEXT_ACTIVITY, NEXT_ACTIVITY_COLUMNS = (
    "SELECT {next_task}, {next_token}",
    "(task bigint, token bigint)",
)
#: The SQL type of each output name (the rest are bigint).
OUTPUT_TYPES = {
    "run": TEXT,
    "recorded": TEXT,
    "fingerprint": TEXT,
    "parent": TEXT,
    "open_children": "boolean",
}

OPERATIONS = (
    Operation(
        "bench_start",
        (("workflow", TEXT), ("request", TEXT), ("run", TEXT), ("queue", TEXT), ("event", BYTEA)),
        (
            Step(
                "INSERT INTO start_requests (namespace, workflow_id, request_id, run_id) "
                "VALUES (" + NS + ", {workflow}, {request}, {run}) ON CONFLICT DO NOTHING "
                "RETURNING run_id",
                ("recorded",),
            ),
            Step(
                "SELECT run_id FROM runs WHERE namespace = " + NS + " AND workflow_id = "
                "{workflow} AND status = 'running' FOR UPDATE"
            ),
            Step(
                "INSERT INTO runs (namespace, run_id, workflow_id, workflow_type, "
                "workflow_version, task_queue, status, start_time_ms, history_length, "
                "definition_fingerprint, cancel_requested, wft_attempt) VALUES (" + NS + ", "
                "{run}, {workflow}, 'hello', '', {queue}, 'running', {now}, 0, "
                "COALESCE((SELECT fingerprint FROM definitions WHERE namespace = " + NS + " "
                "AND name = 'hello' AND version = ''), ''), 0, 1) "
                "RETURNING definition_fingerprint",
                ("fingerprint",),
            ),
            Step(
                "WITH grown AS (UPDATE runs SET history_length = 2 WHERE namespace = " + NS + " "
                "AND run_id = {run}) INSERT INTO history (namespace, run_id, event_id, kind, "
                "event_time_ms, data) VALUES (" + NS + ", {run}, 1, 'a', {now}, {event}), "
                "(" + NS + ", {run}, 2, 'b', {now}, {event})"
            ),
            Step(
                "INSERT INTO tasks (namespace, run_id, kind, task_queue, state, visible_at_ms, "
                "due_ms, attempt, fencing_token, created_at_ms) SELECT " + NS + ", {run}, "
                "'workflow', {queue}, 'queued', {now}, {now}, 1, 0, {now} WHERE NOT EXISTS "
                "(SELECT 1 FROM tasks WHERE namespace = " + NS + " AND run_id = {run} AND "
                f"kind = 'workflow' AND state IN {OPEN}) ON CONFLICT DO NOTHING"
            ),
        ),
        notify=True,
    ),
    Operation(
        "bench_claim",
        (("queue", TEXT), ("worker", TEXT)),
        (
            Step(
                "UPDATE tasks SET state = 'leased', worker_id = {worker}, "
                "fencing_token = fencing_token + 1, attempt = CASE WHEN state = 'waiting' "
                "THEN attempt + 1 ELSE attempt END, claimed_at_ms = {now}, "
                "expires_at_ms = {now} + 10000, due_ms = {now} + 10000, outcome_token = NULL, "
                "outcome_kind = NULL WHERE task_id = (SELECT task_id FROM tasks WHERE "
                "namespace = " + NS + " AND kind = 'workflow' AND task_queue = {queue} AND "
                f"due_ms IS NOT NULL AND due_ms <= {{now}} AND state IN {OPEN} "
                "ORDER BY due_ms, task_id LIMIT 1 FOR UPDATE SKIP LOCKED) "
                "RETURNING task_id, run_id, fencing_token",
                ("task", "run", "token"),
            ),
            Step(
                "UPDATE runs SET wft_attempt = 1 WHERE namespace = " + NS + " AND run_id = {run} "
                "RETURNING history_length",
                ("length",),
            ),
        ),
        "SELECT {task}, {token}, data FROM history WHERE namespace = " + NS + " AND "
        "run_id = {run} AND event_id <= {length} ORDER BY event_id",
        "(task bigint, token bigint, data bytea)",
    ),
    Operation(
        "bench_complete_workflow_task",
        (
            ("task", BIGINT),
            ("token", BIGINT),
            ("worker", TEXT),
            ("queue", TEXT),
            ("seq", BIGINT),
            ("event", BYTEA),
        ),
        (fence("workflow", "run_id", ("run",)), LOCK_RUN, *SCHEDULE),
        NEXT_ACTIVITY,
        NEXT_ACTIVITY_COLUMNS,
    ),
    Operation(
        "bench_complete_activity_next",
        (("task", BIGINT), ("token", BIGINT), ("worker", TEXT), ("queue", TEXT), ("event", BYTEA)),
        (
            fence("activity", "run_id, seq", ("run", "done_seq")),
            LOCK_RUN,
            Step("SELECT {done_seq} + 1", ("seq",)),
            *SCHEDULE,
        ),
        NEXT_ACTIVITY,
        NEXT_ACTIVITY_COLUMNS,
    ),
    Operation(
        "bench_complete_activity_close",
        (("task", BIGINT), ("token", BIGINT), ("worker", TEXT), ("event", BYTEA)),
        (
            fence("activity", "run_id", ("run",)),
            LOCK_RUN,
            APPEND_3,
            Step(
                "UPDATE runs SET status = 'completed', close_time_ms = {now}, result = {event}, "
                "failure = NULL, deadline_ms = NULL, pending_updates = 0 WHERE namespace = "
                + NS
                + " AND run_id = {run} RETURNING parent_run_id, EXISTS (SELECT 1 FROM runs "
                "AS child WHERE child.namespace = runs.namespace AND child.parent_run_id = "
                "runs.run_id AND child.status = 'running') AS open_children",
                ("parent", "open_children"),
            ),
            Step(
                "UPDATE tasks SET state = 'cancelled', due_ms = NULL, queue_deadline_ms = NULL, "
                "cancel_requested = 0 WHERE namespace = " + NS + " AND run_id = {run} AND "
                f"state IN {OPEN}"
            ),
        ),
        notify=True,
    ),
)
BY_NAME = {operation.name: operation for operation in OPERATIONS}
NOTIFY = 'NOTIFY durable_rpc, \'{"tasks": [["default", "q", "workflow"]]}\''
_NAME = re.compile(r"\{(\w+)\}")


def _as_function(operation: Operation) -> str:
    """The operation as a PL/pgSQL function: names become v_<name> variables."""

    def pl(sql: str) -> str:
        return _NAME.sub(lambda match: f"v_{match.group(1)}", sql)

    params = ", ".join(f"v_{name} {kind}" for name, kind in operation.params)
    outputs = sorted({name for step in operation.steps for name in step.outputs})
    declare = "".join(f"  v_{name} {OUTPUT_TYPES.get(name, BIGINT)};\n" for name in outputs)
    body = []
    for index, step in enumerate(operation.steps):
        if step.outputs:
            into = ", ".join(f"v_{name}" for name in step.outputs)
            body.append(
                f"  {pl(step.sql)} INTO {into};\n"
                f"  IF NOT FOUND THEN RAISE EXCEPTION 'stale at step {index}'; END IF;"
            )
        else:
            body.append(
                f"  {pl(step.sql)};"
                if not step.sql.startswith("SELECT")
                else f"  PERFORM {pl(step.sql)[len('SELECT ') :]};"
            )
    if operation.notify:
        body.append(f"  {NOTIFY};")
    return (
        f"CREATE FUNCTION {operation.name}({params}) RETURNS SETOF record LANGUAGE plpgsql "
        f"AS $fn$\nDECLARE\n  v_now bigint := {NOW};\n{declare}BEGIN\n"
        + "\n".join(body)
        + (f"\n  RETURN QUERY {pl(operation.result)};" if operation.result else "\n  RETURN;")
        + "\nEND $fn$"
    )


def _as_statement(sql: str) -> str:
    return _NAME.sub(lambda match: f"%({match.group(1)})s", sql)


def by_statements(cur: psycopg.Cursor[Any], name: str, values: dict[str, Any]) -> list[Any]:
    operation = BY_NAME[name]
    values = dict(values)
    cur.execute(f"BEGIN; SELECT {NOW}")
    cur.nextset()
    values["now"] = cur.fetchone()[0]  # type: ignore[index]
    for step in operation.steps:
        cur.execute(_as_statement(step.sql), values)
        if step.outputs:
            row = cur.fetchone()
            if row is None:
                raise RuntimeError(f"stale at step {operation.steps.index(step)}")
            values.update(zip(step.outputs, row, strict=True))
    rows = []
    if operation.result:
        rows = cur.execute(_as_statement(operation.result), values).fetchall()
    cur.execute(f"{NOTIFY}; COMMIT" if operation.notify else "COMMIT")
    return rows


def by_function(cur: psycopg.Cursor[Any], name: str, values: dict[str, Any]) -> list[Any]:
    operation = BY_NAME[name]
    args = ", ".join(f"%({param})s" for param, _ in operation.params)
    return cur.execute(f"SELECT * FROM {name}({args}) AS {operation.columns}", values).fetchall()


Way = Callable[[psycopg.Cursor[Any], str, dict[str, Any]], list[Any]]


def one_workflow(cur: psycopg.Cursor[Any], way: Way, queue: str, worker: str) -> None:
    event = os.urandom(160)
    workflow, run = uuid.uuid4().hex, uuid.uuid4().hex
    common = {"queue": queue, "worker": worker, "event": event}
    way(cur, "bench_start", {**common, "workflow": workflow, "request": workflow, "run": run})
    claimed = way(cur, "bench_claim", common)
    assert len(claimed) == 2, "the workflow task was claimed with its two events"
    task, token = claimed[0][0], claimed[0][1]
    [(task, token)] = way(
        cur, "bench_complete_workflow_task", {**common, "task": task, "token": token, "seq": 1}
    )
    [(task, token)] = way(
        cur, "bench_complete_activity_next", {**common, "task": task, "token": token}
    )
    way(cur, "bench_complete_activity_close", {**common, "task": task, "token": token})
    status = cur.execute(
        "SELECT status FROM runs WHERE namespace = 'default' AND run_id = %s", (run,)
    ).fetchone()
    assert status == ("completed",), status


class Meter:
    """Wall time, this process's CPU (the driver, or the store) and PostgreSQL's CPU."""

    def start(self) -> None:
        self.wall, self.client, self.backend = (
            time.perf_counter(),
            time.process_time(),
            postgres_cpu_s(),
        )

    def figures(self, done: int) -> dict[str, float]:
        wall = time.perf_counter() - self.wall
        client = time.process_time() - self.client
        backend = postgres_cpu_s() - self.backend
        return {
            "workflows_per_s": done / wall,
            "client_cpu_ms_per_workflow": client / done * 1e3,
            "postgres_cpu_ms_per_workflow": backend / done * 1e3,
            "total_cpu_ms_per_workflow": (client + backend) / done * 1e3,
        }


def run_way(url: str, way: Way, workflows: int, threads: int) -> dict[str, float]:
    connections = [psycopg.connect(url, autocommit=True) for _ in range(threads)]
    per_thread = workflows // threads
    errors: list[BaseException] = []

    def drive(index: int) -> None:
        try:
            cur = connections[index].cursor()
            for _ in range(per_thread):
                one_workflow(cur, way, f"q{index}", f"w{index}")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=drive, args=(i,)) for i in range(threads)]
    meter = Meter()
    meter.start()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    figures = meter.figures(per_thread * threads)
    for conn in connections:
        conn.close()
    if errors:
        raise errors[0]
    return figures


def _schedule_activity(seq: int) -> workflow_task_pb2.Command:
    options = options_pb2.ActivityOptions()
    options.start_to_close_timeout.FromMilliseconds(30_000)
    return workflow_task_pb2.Command(
        seq=seq,
        schedule_activity=workflow_task_pb2.ScheduleActivity(
            activity_type="say_hello", input=payload_pb2.Payload(data=b"bench"), options=options
        ),
    )


async def store_workflow(store: Store, queue: str, worker: str) -> None:
    """The same workflow through the store's own operations (what the server calls)."""
    workflow, data = uuid.uuid4().hex, payload_pb2.Payload(data=b"Hello").SerializeToString()
    started = await store.start_workflow("default", workflow, "hello", "", queue, data, workflow)
    task = await store.claim_workflow_task("default", queue, worker, 30_000)
    assert task is not None, "the workflow task was claimed"
    eager = EagerActivities(queue, frozenset({"say_hello"}), 1)
    decided = await store.complete_workflow_task_tracked(
        "default", task.lease, len(task.events), [_schedule_activity(1)], eager=eager
    )
    [first] = decided.eager_activities
    middle = await store.complete_activity_task_inline(
        "default",
        first.lease,
        data,
        inline=InlineWorkflowTask(
            started.run_id, decided.history_length, [_schedule_activity(2)], eager=eager
        ),
    )
    assert middle.inline is not None, "the first result carried the next decision"
    [second] = middle.inline.eager_activities
    close = workflow_task_pb2.Command(
        seq=3, complete_workflow=workflow_task_pb2.CompleteWorkflow(result=payload_pb2.Payload())
    )
    await store.complete_activity_task_inline(
        "default",
        second.lease,
        data,
        inline=InlineWorkflowTask(started.run_id, middle.inline.history_length, [close]),
    )
    outcome = await store.get_outcome("default", workflow, started.run_id)
    assert outcome.status == "completed", outcome.status


def run_store(url: str, workflows: int, concurrency: int) -> dict[str, float]:
    per_loop = workflows // concurrency

    async def drive() -> dict[str, float]:
        store = open_store(url)
        await store.open()
        try:
            meter = Meter()
            meter.start()

            async def loop(index: int) -> None:
                for _ in range(per_loop):
                    await store_workflow(store, f"s{index}", f"w{index}")

            await asyncio.gather(*(loop(index) for index in range(concurrency)))
            return meter.figures(per_loop * concurrency)
        finally:
            await store.close()

    return asyncio.run(drive())


def measure(url: str, workflows: int, threads: int, rounds: int) -> dict[str, Any]:
    async def migrate() -> None:
        store = open_store(url)
        await store.open()
        await store.close()

    asyncio.run(migrate())
    with psycopg.connect(url, autocommit=True) as conn:
        for operation in OPERATIONS:
            conn.execute(_as_function(operation))
    ways: dict[str, Callable[[], dict[str, float]]] = {
        "store": lambda: run_store(url, workflows, threads),
        "statements": lambda: run_way(url, by_statements, workflows, threads),
        "function": lambda: run_way(url, by_function, workflows, threads),
    }
    results: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
    run_way(url, by_function, threads * 20, threads)  # warm the caches
    run_store(url, threads * 20, threads)
    with psycopg.connect(url, autocommit=True) as conn:
        # Statistics, as autovacuum gathers them within a minute: plans made for the empty
        # tables of a fresh database look runs up by scanning their namespace.
        conn.execute("ANALYZE")
    for _ in range(rounds):
        for name, run in ways.items():  # interleaved: the tables grow alike for each
            results[name].append(run())
    return {
        name: max(runs, key=lambda figures: figures["workflows_per_s"])
        | {"workflows_per_s_runs": [round(r["workflows_per_s"], 1) for r in runs]}
        for name, runs in results.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pg-url", help="PostgreSQL cluster on this machine (default: a throwaway one)"
    )
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, database("postgres", args.pg_url, tmp) as url:
        results = measure(url, args.workflows, args.threads, args.rounds)
    if args.json:
        print(
            json.dumps(
                {
                    "benchmark": "pg_ceiling",
                    "workflows": args.workflows,
                    "threads": args.threads,
                    **results,
                },
                indent=2,
            )
        )
    else:
        for way, figures in results.items():
            print(
                f"{way:>10}: {figures['workflows_per_s']:6.0f} wf/s "
                f"(runs {figures['workflows_per_s_runs']}), CPU per workflow: "
                f"client {figures['client_cpu_ms_per_workflow']:.2f} ms, "
                f"postgres {figures['postgres_cpu_ms_per_workflow']:.2f} ms, "
                f"total {figures['total_cpu_ms_per_workflow']:.2f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
