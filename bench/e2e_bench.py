"""End-to-end benchmark: the hello workload through a real server, worker and client.

Starts `durable-rpc server` on a temporary SQLite file (every acknowledged write is
fsynced: WAL with synchronous=FULL, group commit), one worker process and a client in
this process, then measures the hello workload (a workflow calling two activities that
return short strings):

- latency: p50/p99 of --sequential runs started one after another (start -> result);
- throughput: --workflows runs started concurrently, workflows/s until all complete
  (best and median of --reps);
- peak RSS (VmHWM) of the server and the worker process;
- with --limits, every flow-control mechanism a hello run can meet is configured, set
  high enough never to hold a run back (so the figures are what checking them costs): a
  concurrency limit on the task queue, a rate limit on each activity type and the
  namespace's admission policy (open runs and start rate);
- CPU per workflow over the whole run, from /proc: the server(s), the worker, this process
  (the client) and, on PostgreSQL, every postgres process (a cluster on this machine;
  with --pg-pid, only that cluster's, whose peak RSS is then reported too).

The worker (--worker-settings): ``tuned``, the default here, runs --worker-concurrency
claim-and-execute cycles (64) with twice as many activity slots; ``defaults`` makes it as
the README's quickstart does, ``async with Worker(client, task_queue=..., workflows=...,
activities=...)`` with nothing else set (the SDK's default supervisor).

bench/peers.py runs this beside DBOS Transact's side of the workload (bench/dbos_hello.py)
on the same store.

    python bench/e2e_bench.py [--workflows 500] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from _checkout import child_env
from _latency import percentile
from _proc import cpu_s, peak_rss_mib, postgres_cpu_s, postgres_peak_rss_mib
from bench_stores import connect, database, server_commands, target

from durable_rpc import (
    CancellationToken,
    Client,
    Worker,
    WorkflowSupervisor,
    WorkflowSupervisorConfig,
    activity,
    workflow,
)
from durable_rpc._loop import run_event_loop


@activity.defn
async def say_hello(name: str) -> str:
    return f"Hello, {name}!"


@activity.defn
async def say_bye(name: str) -> str:
    return f"Bye, {name}!"


@workflow.defn(name="BenchHello")
class BenchHello:
    @workflow.run
    async def run(self, name: str) -> str:
        timeout = timedelta(seconds=30)
        hello = await workflow.execute_activity(say_hello, name, start_to_close_timeout=timeout)
        bye = await workflow.execute_activity(say_bye, name, start_to_close_timeout=timeout)
        return f"{hello} {bye}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_by_process(
    servers: list[subprocess.Popen[bytes]],
    worker: subprocess.Popen[bytes],
    store: str,
    pg_pid: int | None = None,
) -> dict[str, float]:
    """CPU seconds so far of each kind of process of the benchmark."""
    cpu = {
        "server": sum(cpu_s(server.pid) for server in servers),
        "worker": cpu_s(worker.pid),
        "client": time.process_time(),
    }
    if store == "postgres":
        cpu["postgres"] = postgres_cpu_s(pg_pid)
    return cpu


def bootstrap_key(db_url: str) -> str:
    """An admin key made offline, as an operator makes the first one."""
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_rpc.cli",
            "token",
            "create",
            "--role",
            "admin",
            "--db",
            db_url,
        ],
        capture_output=True,
        text=True,
        check=True,
        env=child_env(),
    )
    return made.stdout.strip()


#: --limits: CLI commands run against the first server before the measurement.
LIMITS = (
    ("task-queue", "limit", "set", "bench", "100000"),
    ("task-queue", "rate-limit", "set", "say_hello", "100000/s", "--activity-type"),
    ("task-queue", "rate-limit", "set", "say_bye", "100000/s", "--activity-type"),
    ("namespace", "admission", "set", "--max-open-runs", "100000", "--rate", "1000000"),
)


def configure_limits(address: str) -> None:
    for command in LIMITS:
        subprocess.run(
            [sys.executable, "-m", "durable_rpc.cli", *command, "--address", address],
            check=True,
            capture_output=True,
            env=child_env(),
        )


#: --worker-settings: the worker as users make it, or tuned for this workload.
WORKER_SETTINGS = ("tuned", "defaults")
#: Claim-and-execute cycles of the tuned worker unless --worker-concurrency says otherwise.
TUNED_CLAIM_CYCLES = 64


@dataclass(frozen=True)
class WorkerTuning:
    """What the tuned worker sets; the SDK's defaults are 64 cycles (8 polling while the
    queues are quiet), 100 activity slots."""

    claim_cycles: int  # WorkflowSupervisorConfig(max_concurrency)
    activity_slots: int  # Worker(max_concurrent_activities)


def worker_tuning(settings: str, claim_cycles: int | None) -> WorkerTuning | None:
    """The tuning --worker-settings and --worker-concurrency ask for; None: the worker
    exactly as the README's quickstart makes it (every option at its default)."""
    if settings not in WORKER_SETTINGS:
        raise ValueError(f"unknown worker settings {settings!r}: one of {WORKER_SETTINGS}")
    if settings == "defaults":
        if claim_cycles is not None:
            raise ValueError("--worker-concurrency tunes the worker: not with defaults")
        return None
    cycles = TUNED_CLAIM_CYCLES if claim_cycles is None else claim_cycles
    if cycles < 1:
        raise ValueError("--worker-concurrency must be at least 1")
    return WorkerTuning(claim_cycles=cycles, activity_slots=cycles * 2)


async def run_worker(
    address: str, task_queue: str, tuning: WorkerTuning | None, metrics: bool = False
) -> None:
    """The worker process, stopped by SIGTERM: with ``tuning``, a WorkflowSupervisor of
    its cycles; without, ``async with Worker(...)`` as users write it. With `metrics`, it
    records on an SDK MeterProvider (read by an in-memory reader, so the recording costs
    what it costs under any exporter)."""
    client = await connect(address)
    token = CancellationToken()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, token.cancel)
    options: dict[str, Any] = {}
    if tuning is not None:
        options["max_concurrent_activities"] = tuning.activity_slots
    if metrics:
        from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader

        # As docs/operations.md recommends for a worker (the server's own default).
        options["meter_provider"] = MeterProvider(
            metric_readers=[InMemoryMetricReader()], exemplar_filter=AlwaysOffExemplarFilter()
        )
    worker = Worker(
        client,
        task_queue=task_queue,
        workflows=[BenchHello],
        activities=[say_hello, say_bye],
        **options,
    )
    if tuning is None:
        async with worker:
            print("worker ready", flush=True)
            await token.wait()
    else:
        supervisor = WorkflowSupervisor(worker, WorkflowSupervisorConfig(tuning.claim_cycles))
        run = asyncio.ensure_future(supervisor.run(token))
        print("worker ready", flush=True)
        await run
    await client.close()


async def one(client: Client, queue: str) -> float:
    start = time.perf_counter()
    handle = await client.start_workflow(
        BenchHello.run, "bench", id=f"b-{uuid.uuid4().hex}", task_queue=queue
    )
    result = await handle.result()
    assert result == "Hello, bench! Bye, bench!", result
    return time.perf_counter() - start


async def measure(
    address: str, queue: str, args: argparse.Namespace, db_url: str
) -> dict[str, Any]:
    client = await connect(address)
    for _ in range(args.warmup):
        await one(client, queue)
    if args.store == "postgres":
        # Statistics, as autovacuum gathers them within a minute on a real deployment:
        # plans made for the empty tables of a fresh database look runs up by scanning
        # their namespace (measured: the same throughput, but 20x the buffers per lookup).
        import psycopg

        from durable_rpc.store._pg_url import parse_url

        with psycopg.connect(parse_url(db_url)[0], autocommit=True) as conn:
            conn.execute("ANALYZE")
    latencies = [await one(client, queue) for _ in range(args.sequential)]
    rates = []
    for _ in range(args.reps):
        start = time.perf_counter()
        await asyncio.gather(*(one(client, queue) for _ in range(args.workflows)))
        rates.append(args.workflows / (time.perf_counter() - start))
    await client.close()
    return {
        "latency_p50_ms": percentile(latencies, 50) * 1000,
        "latency_p99_ms": percentile(latencies, 99) * 1000,
        "throughput_wf_per_s_best": max(rates),
        "throughput_wf_per_s_median": statistics.median(rates),
        "throughput_runs": rates,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=500)
    parser.add_argument("--sequential", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=2, metavar=("ADDRESS", "QUEUE"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--worker-settings",
        choices=WORKER_SETTINGS,
        default="tuned",
        help="tuned: --worker-concurrency cycles, twice as many activity slots; defaults:"
        " the worker as the README makes it",
    )
    parser.add_argument(
        "--worker-concurrency",
        type=int,
        help=f"claim-and-execute cycles of the tuned worker (default {TUNED_CLAIM_CYCLES})",
    )
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--pg-url", help="PostgreSQL cluster (default: a throwaway one)")
    parser.add_argument(
        "--pg-pid",
        type=int,
        help="postmaster PID of --pg-url's cluster: count only its CPU (default: every"
        " postgres process on this machine) and report its peak RSS",
    )
    parser.add_argument("--replicas", type=int, default=1, help="server replicas (postgres)")
    parser.add_argument(
        "--auth", action="store_true", help="servers with --auth; every call carries an API key"
    )
    parser.add_argument(
        "--limits",
        action="store_true",
        help="flow control configured (a queue limit, rate limits, admission), never binding",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="metrics on: servers with --metrics-listen, the worker on an SDK MeterProvider",
    )
    parser.add_argument(
        "--metrics-out",
        type=Path,
        metavar="FILE",
        help="implies --metrics; writes the first server's /metrics text after the run",
    )
    args = parser.parse_args()
    args.metrics = args.metrics or args.metrics_out is not None
    try:
        tuning = worker_tuning(args.worker_settings, args.worker_concurrency)
    except ValueError as error:
        parser.error(str(error))
    if args.worker:
        run_event_loop(run_worker(args.worker[0], args.worker[1], tuning, args.metrics))
        return 0

    with (
        tempfile.TemporaryDirectory(prefix="durable-bench-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        queue = "bench"
        db_url = stack.enter_context(database(args.store, args.pg_url, tmp))
        replicas = server_commands(db_url, args.replicas)
        if args.auth:
            os.environ["DURABLE_RPC_API_KEY"] = bootstrap_key(db_url)
            replicas = [([*command, "--auth"], address) for command, address in replicas]
        metrics_ports = [free_port() for _ in replicas] if args.metrics else []
        for i, port in enumerate(metrics_ports):
            command, replica_address = replicas[i]
            replicas[i] = ([*command, "--metrics-listen", f"127.0.0.1:{port}"], replica_address)
        servers = [subprocess.Popen(command, env=child_env()) for command, _ in replicas]
        address = target([replica_address for _, replica_address in replicas])
        env = child_env()
        worker = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).resolve()),
                "--worker",
                address,
                queue,
                "--worker-settings",
                args.worker_settings,
                *(
                    ["--worker-concurrency", str(args.worker_concurrency)]
                    if args.worker_concurrency is not None
                    else []
                ),
                *(["--metrics"] if args.metrics else []),
            ],
            stdout=subprocess.PIPE,
            env=env,
        )
        try:
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != b"worker ready":
                raise SystemExit("worker did not start")
            if args.limits:
                configure_limits(replicas[0][1])
            cpu = cpu_by_process(servers, worker, args.store, args.pg_pid)
            figures = run_event_loop(measure(address, queue, args, db_url))
            cpu_after = cpu_by_process(servers, worker, args.store, args.pg_pid)
            ran = args.warmup + args.sequential + args.reps * args.workflows
            figures["cpu_ms_per_workflow"] = {
                name: round((cpu_after[name] - cpu[name]) / ran * 1e3, 2) for name in cpu
            }
            figures["server_peak_rss_mib"] = max(peak_rss_mib(s.pid) for s in servers)
            figures["worker_peak_rss_mib"] = peak_rss_mib(worker.pid)
            if args.pg_pid is not None:
                figures["postgres_peak_rss_mib"] = postgres_peak_rss_mib(args.pg_pid)
            if args.metrics_out is not None:
                url = f"http://127.0.0.1:{metrics_ports[0]}/metrics"
                with urllib.request.urlopen(url, timeout=10) as response:
                    args.metrics_out.write_bytes(response.read())
        finally:
            # The worker first, so it can deregister while the server is still up.
            for proc in (worker, *servers):
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    figures["workflows"] = args.workflows
    figures["worker_settings"] = args.worker_settings
    figures["worker_tuning"] = None if tuning is None else asdict(tuning)
    figures["auth"] = args.auth
    figures["metrics"] = args.metrics
    figures["limits"] = args.limits
    figures["store"] = (
        "sqlite-file (synchronous=FULL)"
        if args.store == "sqlite"
        else f"postgres (fsync on), {args.replicas} replica(s)"
    )
    if args.json:
        print(json.dumps({"benchmark": "e2e", **figures}, indent=2))
    else:
        print(f"store: {figures['store']}")
        print(
            "worker: defaults (as the README makes it)"
            if tuning is None
            else f"worker: tuned ({tuning.claim_cycles} claim cycles,"
            f" {tuning.activity_slots} activity slots)"
        )
        print(
            f"latency (sequential, n={args.sequential}): p50 {figures['latency_p50_ms']:.1f} ms,"
            f" p99 {figures['latency_p99_ms']:.1f} ms"
        )
        print(
            f"throughput ({args.workflows} concurrent, {args.reps} reps): best "
            f"{figures['throughput_wf_per_s_best']:.0f} wf/s, median "
            f"{figures['throughput_wf_per_s_median']:.0f} wf/s"
        )
        print(
            f"peak RSS: server {figures['server_peak_rss_mib']:.0f} MiB, worker "
            f"{figures['worker_peak_rss_mib']:.0f} MiB"
        )
        cpu = figures["cpu_ms_per_workflow"]
        print("CPU per workflow: " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in cpu.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
