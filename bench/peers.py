"""Peers benchmark: our hello benchmark and DBOS Transact's, on the same store, in one run.

Runs ``bench/e2e_bench.py --json`` (server, one worker process, client) and DBOS
Transact's side of the same workload, ``bench/dbos_hello.py`` (DBOS is a library: one app
process; ``--dbos-harness PATH`` runs another script taking its arguments), as
subprocesses with the same phases: --warmup runs, --sequential runs one after another for
p50/p99, --workflows concurrent runs for throughput. The systems alternate rep by rep
(ours, DBOS, ours, DBOS, ...) so the machine's noise hits both alike; each rep is a fresh
process and a fresh database for each system.

Our worker is made as users make it, as the README's quickstart does (``async with
Worker(client, task_queue=..., workflows=..., activities=...)``, every option at its
default). With --tuned, the benchmark's tuned worker (e2e_bench's ``--worker-settings
tuned``: more claim-and-execute cycles and activity slots) is measured too, in the same
alternation, and reported beside it under its own label, never in its place.

Stores: ``sqlite``, each system on its own file in a temporary directory (ours:
synchronous=FULL); ``postgres``, one throwaway cluster for both (scripts/pg_cluster.sh,
fsync on), each system on its own database, or an existing cluster with ``--pg-url`` (a
local one still gets its postgres CPU counted: its postmaster is found from a backend).

Printed, for each system: throughput per rep, best and median, p50/p99 (median over
reps), peak RSS and CPU per workflow of every process (ours: server, worker, client,
postgres; DBOS: app, postgres), and the ratios ours / DBOS's of throughput and p50 (for
each of our workers).

DBOS (``dbos==3.4.0``) lives in its own venv, made on first use (``--dbos-venv``,
default ~/.cache/durable-rpc-bench/venv-dbos); it is never a dependency of this project.

    python bench/peers.py [--store sqlite|postgres] [--reps 3] [--tuned] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DBOS_VERSION = "3.4.0"
DEFAULT_HARNESS = ROOT / "bench" / "dbos_hello.py"
DEFAULT_VENV = Path.home() / ".cache" / "durable-rpc-bench" / "venv-dbos"
RUN_TIMEOUT_S = 1800
#: Our workers, by e2e_bench's --worker-settings: the summary key of each.
OURS_KEYS = {"defaults": "durable_rpc", "tuned": "durable_rpc_tuned"}


class PeersError(Exception):
    """A setup or run failure, reported as one line."""


# ---- the figures (pure functions: unit-tested in tests/test_bench_peers.py) ----


def worker_variants(tuned: bool) -> tuple[str, ...]:
    """Our workers to measure (e2e_bench's --worker-settings): always the one users make,
    the tuned one beside it when asked."""
    return ("defaults", "tuned") if tuned else ("defaults",)


def ours_title(settings: str, tuning: dict[str, int] | None) -> str:
    """How a worker's figures are labelled in the printed report."""
    if settings == "defaults":
        return "durable-rpc, worker with defaults (as the README makes it)"
    if tuning is None:
        raise ValueError(f"worker settings {settings!r} without their tuning")
    return (
        f"durable-rpc, tuned worker (--tuned: {tuning['claim_cycles']} claim cycles,"
        f" {tuning['activity_slots']} activity slots)"
    )


def ours_rep(record: dict[str, Any]) -> dict[str, Any]:
    """One rep of ours, from e2e_bench's --json object (run with --reps 1)."""
    return {
        "worker_settings": record["worker_settings"],
        "worker_tuning": record["worker_tuning"],
        "throughput_wf_per_s": record["throughput_runs"][0],
        "latency_p50_ms": record["latency_p50_ms"],
        "latency_p99_ms": record["latency_p99_ms"],
        "peak_rss_mib": {
            "server": record["server_peak_rss_mib"],
            "worker": record["worker_peak_rss_mib"],
            **(
                {"postgres": record["postgres_peak_rss_mib"]}
                if "postgres_peak_rss_mib" in record
                else {}
            ),
        },
        "cpu_ms_per_workflow": dict(record["cpu_ms_per_workflow"]),
    }


def dbos_rep(record: dict[str, Any]) -> dict[str, Any]:
    """One rep of DBOS, from a line of its harness's results JSONL (run with --reps 1).

    Its CPU seconds cover warm-up, sequential and throughput phases, as e2e_bench's do,
    so both divide by the same count of workflows."""
    params = record["params"]
    ran = params["warmup"] + params["latency"] + params["reps"] * params["n"]
    throughput = [entry["wf_per_s"] for entry in record["throughput"]]
    peak = {"app": record["worker_peak_rss_mb"]}
    if "server_peak_rss_mb" in record:
        peak["postgres"] = record["server_peak_rss_mb"]
    cpu = record["cpu_s_during_bench"]
    return {
        "throughput_wf_per_s": statistics.median(throughput),
        "latency_p50_ms": record["latency_ms"]["p50"],
        "latency_p99_ms": record["latency_ms"]["p99"],
        "peak_rss_mib": peak,
        "cpu_ms_per_workflow": {
            ("app" if name == "app_worker" else name): round(seconds / ran * 1e3, 2)
            for name, seconds in cpu.items()
        },
    }


def system_summary(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's figures over its reps: per rep, best and median."""
    if not reps:
        raise ValueError("no reps to summarise")
    rates = [rep["throughput_wf_per_s"] for rep in reps]
    p50s = [rep["latency_p50_ms"] for rep in reps]
    p99s = [rep["latency_p99_ms"] for rep in reps]
    kinds = list(dict.fromkeys(k for rep in reps for k in rep["cpu_ms_per_workflow"]))
    processes = list(dict.fromkeys(k for rep in reps for k in rep["peak_rss_mib"]))
    return {
        "throughput_runs": rates,
        "throughput_wf_per_s_best": max(rates),
        "throughput_wf_per_s_median": statistics.median(rates),
        "latency_p50_ms_runs": p50s,
        "latency_p50_ms": statistics.median(p50s),
        "latency_p99_ms": statistics.median(p99s),
        # The peak of a process kind over every rep: the bound a deployment must size for.
        "peak_rss_mib": {
            name: max(rep["peak_rss_mib"][name] for rep in reps if name in rep["peak_rss_mib"])
            for name in processes
        },
        "cpu_ms_per_workflow": {
            name: statistics.median(
                rep["cpu_ms_per_workflow"][name]
                for rep in reps
                if name in rep["cpu_ms_per_workflow"]
            )
            for name in kinds
        },
    }


def ours_summary(settings: str, reps: list[dict[str, Any]]) -> dict[str, Any]:
    """One of our workers' figures over its reps, labelled with its settings."""
    if any(rep["worker_settings"] != settings for rep in reps):
        raise ValueError(f"reps of another worker among the {settings!r} ones")
    figures = system_summary(reps)
    tuning = reps[0]["worker_tuning"]
    return {
        "worker_settings": settings,
        "worker_tuning": tuning,
        "title": ours_title(settings, tuning),
        **figures,
    }


def compare(
    ours: dict[str, list[dict[str, Any]]], dbos: list[dict[str, Any]], meta: dict[str, Any]
) -> dict[str, Any]:
    """Every system's figures (``ours``: reps by worker settings, "defaults" required) and
    the ratios ours / DBOS's of each of our workers (throughput: higher is better for us
    above 1; p50: lower is better for us below 1)."""
    if "defaults" not in ours:
        raise ValueError("the worker users make (defaults) is always measured")
    theirs = system_summary(dbos)
    summary: dict[str, Any] = {"benchmark": "peers", **meta}
    ratios = {}
    for settings, reps in ours.items():
        mine = ours_summary(settings, reps)
        summary[OURS_KEYS[settings]] = mine
        ratios[OURS_KEYS[settings]] = {
            "throughput_median": mine["throughput_wf_per_s_median"]
            / theirs["throughput_wf_per_s_median"],
            "throughput_best": mine["throughput_wf_per_s_best"]
            / theirs["throughput_wf_per_s_best"],
            "latency_p50": mine["latency_p50_ms"] / theirs["latency_p50_ms"],
        }
    summary["dbos"] = theirs
    summary["ratios"] = ratios
    return summary


def render(summary: dict[str, Any]) -> str:
    """The human-readable report of compare()'s result."""

    def per_process(figures: dict[str, float], unit: str) -> str:
        return ", ".join(
            f"{name} {value:.{2 if unit == 'ms' else 0}f} {unit}" for name, value in figures.items()
        )

    ours = [key for key in OURS_KEYS.values() if key in summary]
    lines = [
        f"store: {summary['store']}; {summary['reps']} rep(s), alternating ours/DBOS; "
        f"{summary['warmup']} warm-up, {summary['sequential']} sequential, "
        f"{summary['workflows']} concurrent"
    ]
    titles = [(key, summary[key]["title"]) for key in ours]
    for key, title in [*titles, ("dbos", f"DBOS {DBOS_VERSION}")]:
        figures = summary[key]
        runs = ", ".join(f"{rate:.0f}" for rate in figures["throughput_runs"])
        lines += [
            f"{title}:",
            f"  throughput per rep: {runs} wf/s; best {figures['throughput_wf_per_s_best']:.0f},"
            f" median {figures['throughput_wf_per_s_median']:.0f} wf/s",
            f"  latency: p50 {figures['latency_p50_ms']:.1f} ms,"
            f" p99 {figures['latency_p99_ms']:.1f} ms (median over reps)",
            f"  peak RSS: {per_process(figures['peak_rss_mib'], 'MiB')}",
            f"  CPU per workflow: {per_process(figures['cpu_ms_per_workflow'], 'ms')}",
        ]
    for key in ours:
        ratios = summary["ratios"][key]
        worker = summary[key]["worker_settings"]
        lines.append(
            f"ours ({worker} worker) / DBOS: throughput {ratios['throughput_median']:.2f}x"
            f" (median), {ratios['throughput_best']:.2f}x (best);"
            f" p50 {ratios['latency_p50']:.2f}x"
        )
    return "\n".join(lines)


def last_json_object(stdout: str) -> dict[str, Any]:
    """The JSON object a benchmark printed last (its progress lines come before it)."""
    start = stdout.rfind("\n{")
    start = 0 if start < 0 and stdout.startswith("{") else start + 1
    if start < 0 or not stdout[start:].startswith("{"):
        raise PeersError("the benchmark printed no JSON object")
    value, _ = json.JSONDecoder().raw_decode(stdout[start:])
    if not isinstance(value, dict):
        raise PeersError("the benchmark printed JSON that is not an object")
    return value


# ---- running the two systems ----


def run(command: list[str], what: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S, check=False
    )
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise PeersError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def dbos_env() -> dict[str, str]:
    """The DBOS harness's environment: nothing of this project's venv or path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return env


def ensure_dbos_venv(venv: Path, python: str) -> Path:
    """The venv's interpreter, with dbos==DBOS_VERSION, made when missing or different."""
    interpreter = venv / "bin" / "python"
    probe = [str(interpreter), "-c", "import importlib.metadata as m; print(m.version('dbos'))"]
    if interpreter.exists():
        found = subprocess.run(probe, capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.strip() == DBOS_VERSION:
            return interpreter
    print(f"installing dbos=={DBOS_VERSION} into {venv}", file=sys.stderr, flush=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    run([python, "-m", "venv", str(venv)], f"{python} -m venv {venv}", env=dbos_env())
    run(
        [str(interpreter), "-m", "pip", "install", "-q", f"dbos=={DBOS_VERSION}"],
        f"pip install dbos=={DBOS_VERSION}",
        env=dbos_env(),
    )
    return interpreter


def with_database(url: str, name: str) -> str:
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(path=f"/{name}"))


def postmaster_pid(url: str) -> int | None:
    """The postmaster of the cluster at ``url`` when it runs on this machine (the parent
    of a backend), for the DBOS harness's CPU and RSS accounting; else None."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        # Read while the connection is open: once it closes, its backend exits (reading
        # after the close failed now and then, as if the cluster ran elsewhere).
        try:
            stat = Path(f"/proc/{row[0]}/stat").read_text()
        except OSError:
            return None  # another machine
    return int(stat.rsplit(")", 1)[1].split()[1])


@contextlib.contextmanager
def postgres(pg_url: str | None) -> Iterator[tuple[str, str, int | None]]:
    """(URL for e2e_bench, which makes its own database per run; DBOS's database URL; the
    postmaster PID) on one cluster: ``pg_url``'s, else a throwaway one (fsync on)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import psycopg
    from bench_stores import _cluster

    with _cluster(pg_url) as base:
        name = f"dbos_bench_{uuid.uuid4().hex[:12]}"
        try:
            # DBOS's side resets (drops and recreates) its database itself.
            yield base, with_database(base, name), postmaster_pid(base)
        finally:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--reps", type=int, default=3, help="reps of each system, alternating")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workflows", type=int, default=500, help="concurrent, for throughput")
    parser.add_argument("--sequential", type=int, default=50, help="one after another, for p50")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--pg-url", help="an existing PostgreSQL cluster (default: a throwaway one)"
    )
    parser.add_argument(
        "--tuned",
        action="store_true",
        help="also measure e2e_bench's tuned worker, reported beside the default one",
    )
    parser.add_argument(
        "--dbos-harness",
        type=Path,
        default=DEFAULT_HARNESS,
        help="DBOS's side of the workload (default: bench/dbos_hello.py)",
    )
    parser.add_argument("--dbos-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--dbos-python", default="python3.11", help="makes --dbos-venv")
    parser.add_argument("--dbos-mode", choices=["sync", "async"], default="sync")
    args = parser.parse_args()
    for name in ("reps", "workflows", "sequential"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must not be negative")
    if not args.dbos_harness.is_file():
        parser.error(
            f"DBOS harness not found at {args.dbos_harness} (pass --dbos-harness PATH to a"
            " script taking bench/dbos_hello.py's arguments)"
        )
    try:
        summary = measure(args)
    except PeersError as error:
        print(f"peers: {error}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=2) if args.json else render(summary))
    return 0


def ours_command(args: argparse.Namespace, settings: str) -> list[str]:
    """e2e_bench's command line for one rep with the worker ``settings`` (the one flag that
    makes the difference between our variants)."""
    return [
        sys.executable,
        str(ROOT / "bench" / "e2e_bench.py"),
        "--json",
        "--reps",
        "1",
        "--store",
        args.store,
        "--workflows",
        str(args.workflows),
        "--sequential",
        str(args.sequential),
        "--warmup",
        str(args.warmup),
        "--worker-settings",
        settings,
    ]


def measure(args: argparse.Namespace) -> dict[str, Any]:
    dbos_python = ensure_dbos_venv(args.dbos_venv, args.dbos_python)
    variants = worker_variants(args.tuned)
    pg_options: list[str] = []
    dbos_command = [
        str(dbos_python),
        str(args.dbos_harness.resolve()),
        "--db",
        args.store,
        "--mode",
        args.dbos_mode,
        "--reps",
        "1",
        "--n",
        str(args.workflows),
        "--latency",
        str(args.sequential),
        "--warmup",
        str(args.warmup),
    ]
    ours: dict[str, list[dict[str, Any]]] = {settings: [] for settings in variants}
    dbos: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="durable-peers-") as tmp,
        contextlib.ExitStack() as stack,
    ):
        if args.store == "postgres":
            base, dbos_url, pg_pid = stack.enter_context(postgres(args.pg_url))
            pg_options += ["--pg-url", base]
            if pg_pid is not None:
                pg_options += ["--pg-pid", str(pg_pid)]
            dbos_command += ["--pg-url", dbos_url]
            if pg_pid is not None:
                dbos_command += ["--pg-pid", str(pg_pid)]
        # e2e_bench makes its own SQLite file in its own temporary directory.
        results = Path(tmp) / "dbos-results.jsonl"
        dbos_command += ["--sqlite-file", str(Path(tmp) / "dbos.sqlite"), "--results", str(results)]
        for rep in range(args.reps):
            for settings in variants:
                print(
                    f"rep {rep + 1}/{args.reps}: durable-rpc ({settings} worker)",
                    file=sys.stderr,
                    flush=True,
                )
                command = [*ours_command(args, settings), *pg_options]
                ours[settings].append(
                    ours_rep(last_json_object(run(command, "bench/e2e_bench.py")))
                )
            print(f"rep {rep + 1}/{args.reps}: DBOS", file=sys.stderr, flush=True)
            run(dbos_command, str(args.dbos_harness), env=dbos_env())
            dbos.append(dbos_rep(json.loads(results.read_text().splitlines()[-1])))
    store = (
        "sqlite-file (ours: synchronous=FULL), each system on its own file"
        if args.store == "sqlite"
        else "postgres (fsync on), one cluster, each system on its own database"
    )
    meta = {
        "store": store,
        "reps": args.reps,
        "warmup": args.warmup,
        "sequential": args.sequential,
        "workflows": args.workflows,
        "worker_settings": list(variants),
        "dbos_version": DBOS_VERSION,
        "dbos_mode": args.dbos_mode,
    }
    return compare(ours, dbos, meta)


if __name__ == "__main__":
    sys.exit(main())
