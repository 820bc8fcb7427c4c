"""bench/peers.py's own logic: the figures it derives from both systems' results, its
argument errors, the worker settings it asks e2e_bench for, and the per-cluster postgres
CPU it asks e2e_bench for.

The benchmark itself is not run here: it needs DBOS's venv (an install), and speed is
checked by running it, never by timed assertions."""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from tests.e2e.conftest import ROOT
from tests.scale import cluster as pg

sys.path.insert(0, str(ROOT / "bench"))

import _latency
import _proc
import e2e_bench
import peers

TUNING = {"claim_cycles": 64, "activity_slots": 128}


def e2e_record(
    rate: float,
    p50: float,
    server_rss: float,
    server_cpu: float,
    settings: str = "defaults",
) -> dict[str, Any]:
    """The --json object of `e2e_bench.py --reps 1`, as it prints it."""
    return {
        "benchmark": "e2e",
        "latency_p50_ms": p50,
        "latency_p99_ms": p50 * 2,
        "throughput_wf_per_s_best": rate,
        "throughput_wf_per_s_median": rate,
        "throughput_runs": [rate],
        "cpu_ms_per_workflow": {"server": server_cpu, "worker": 2.0, "client": 1.0},
        "server_peak_rss_mib": server_rss,
        "worker_peak_rss_mib": 50.0,
        "workflows": 500,
        "worker_settings": settings,
        "worker_tuning": TUNING if settings == "tuned" else None,
    }


def dbos_record(rate: float, p50: float, app_cpu_s: float) -> dict[str, Any]:
    """A results line of dbos_hello.py --reps 1 --db postgres --pg-pid ..."""
    return {
        "system": "dbos",
        "latency_ms": {"n": 50, "p50": p50, "p99": p50 * 3},
        "throughput": [{"n": 500, "seconds": 500 / rate, "wf_per_s": rate}],
        "cpu_s_during_bench": {"app_worker": app_cpu_s, "postgres": 1.14},
        "worker_peak_rss_mb": 120.0,
        "server_peak_rss_mb": 30.0,
        "params": {"starters": 1, "n": 500, "latency": 50, "warmup": 20, "reps": 1},
    }


META = {"store": "postgres", "reps": 2, "warmup": 20, "sequential": 50, "workflows": 500}


def test_both_systems_figures_and_the_ratios() -> None:
    ours = [
        peers.ours_rep(e2e_record(300.0, 4.0, 80.0, 3.0)),
        peers.ours_rep(e2e_record(500.0, 6.0, 90.0, 5.0)),
    ]
    dbos = [
        peers.dbos_rep(dbos_record(250.0, 5.0, 2.85)),
        peers.dbos_rep(dbos_record(150.0, 5.0, 5.7)),
    ]
    summary = peers.compare({"defaults": ours}, dbos, META)

    mine, theirs = summary["durable_rpc"], summary["dbos"]
    assert (mine["worker_settings"], mine["worker_tuning"]) == ("defaults", None)
    assert "durable_rpc_tuned" not in summary
    assert mine["throughput_runs"] == [300.0, 500.0]
    assert (mine["throughput_wf_per_s_best"], mine["throughput_wf_per_s_median"]) == (500.0, 400.0)
    assert (mine["latency_p50_ms"], mine["latency_p99_ms"]) == (5.0, 10.0)
    assert mine["peak_rss_mib"] == {"server": 90.0, "worker": 50.0}
    assert mine["cpu_ms_per_workflow"] == {"server": 4.0, "worker": 2.0, "client": 1.0}
    # DBOS's CPU seconds cover 20 + 50 + 500 workflows, as e2e_bench's do.
    assert theirs["cpu_ms_per_workflow"] == {"app": 7.5, "postgres": 2.0}
    assert theirs["peak_rss_mib"] == {"app": 120.0, "postgres": 30.0}
    assert summary["ratios"] == {
        "durable_rpc": {"throughput_median": 2.0, "throughput_best": 2.0, "latency_p50": 1.0}
    }
    text = peers.render(summary)
    assert "durable-rpc, worker with defaults (as the README makes it):" in text
    assert "tuned" not in text
    assert "throughput per rep: 300, 500 wf/s; best 500, median 400 wf/s" in text
    assert "CPU per workflow: app 7.50 ms, postgres 2.00 ms" in text
    assert (
        "ours (defaults worker) / DBOS: throughput 2.00x (median), 2.00x (best); p50 1.00x" in text
    )


def test_the_tuned_worker_is_reported_beside_the_default_one() -> None:
    ours = {
        "defaults": [peers.ours_rep(e2e_record(200.0, 8.0, 80.0, 3.0))],
        "tuned": [peers.ours_rep(e2e_record(400.0, 6.0, 90.0, 5.0, settings="tuned"))],
    }
    summary = peers.compare(ours, [peers.dbos_rep(dbos_record(200.0, 4.0, 2.85))], META)

    assert summary["durable_rpc"]["throughput_runs"] == [200.0]
    tuned = summary["durable_rpc_tuned"]
    assert (tuned["worker_settings"], tuned["worker_tuning"]) == ("tuned", TUNING)
    assert tuned["throughput_runs"] == [400.0]
    assert summary["ratios"]["durable_rpc"]["throughput_median"] == 1.0
    assert summary["ratios"]["durable_rpc_tuned"]["throughput_median"] == 2.0
    text = peers.render(summary)
    default_at = text.index("durable-rpc, worker with defaults (as the README makes it):")
    tuned_at = text.index(
        "durable-rpc, tuned worker (--tuned: 64 claim cycles, 128 activity slots):"
    )
    assert default_at < tuned_at < text.index("DBOS 3.4.0:")
    assert "ours (defaults worker) / DBOS: throughput 1.00x (median)" in text
    assert "ours (tuned worker) / DBOS: throughput 2.00x (median)" in text


def test_the_default_worker_is_always_measured() -> None:
    assert peers.worker_variants(tuned=False) == ("defaults",)
    assert peers.worker_variants(tuned=True) == ("defaults", "tuned")
    tuned_only = {"tuned": [peers.ours_rep(e2e_record(400.0, 6.0, 90.0, 5.0, "tuned"))]}
    dbos = [peers.dbos_rep(dbos_record(200.0, 4.0, 2.85))]
    with pytest.raises(ValueError, match="always measured"):
        peers.compare(tuned_only, dbos, META)
    # A rep of the tuned worker is never counted as one of the default worker.
    mixed = {"defaults": tuned_only["tuned"]}
    with pytest.raises(ValueError, match="another worker"):
        peers.compare(mixed, dbos, META)


def test_one_flag_chooses_the_worker_e2e_bench_makes() -> None:
    """The README's worker (no option set) or the tuned one, and nothing else differs
    between the two commands peers.py runs."""
    assert e2e_bench.worker_tuning("defaults", None) is None
    assert e2e_bench.worker_tuning("tuned", None) == e2e_bench.WorkerTuning(64, 128)
    assert e2e_bench.worker_tuning("tuned", 8) == e2e_bench.WorkerTuning(8, 16)
    with pytest.raises(ValueError, match="not with defaults"):
        e2e_bench.worker_tuning("defaults", 8)
    with pytest.raises(ValueError, match="unknown worker settings"):
        e2e_bench.worker_tuning("fast", None)

    args = argparse.Namespace(store="sqlite", workflows=5, sequential=3, warmup=1)
    default, tuned = peers.ours_command(args, "defaults"), peers.ours_command(args, "tuned")
    assert default[-2:] == ["--worker-settings", "defaults"]
    assert tuned[-2:] == ["--worker-settings", "tuned"]
    assert default[:-1] == tuned[:-1]
    assert "--worker-concurrency" not in default


def test_e2e_bench_refuses_tuning_the_default_worker() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "e2e_bench.py"),
            "--worker-settings",
            "defaults",
            "--worker-concurrency",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--worker-concurrency tunes the worker: not with defaults" in done.stderr
    assert "Traceback" not in done.stderr


def test_dbos_side_is_in_the_repository() -> None:
    assert peers.DEFAULT_HARNESS == ROOT / "bench" / "dbos_hello.py"
    assert peers.DEFAULT_HARNESS.is_file()


def test_both_sides_take_the_nearest_rank_percentile() -> None:
    latencies = [float(ms) for ms in range(100, 0, -1)]
    assert _latency.percentile(latencies, 50) == 50.0
    assert _latency.percentile(latencies, 99) == 99.0
    assert _latency.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        _latency.percentile([], 50)


def test_no_reps_is_refused() -> None:
    with pytest.raises(ValueError, match="no reps"):
        peers.system_summary([])


def test_the_json_object_after_progress_lines() -> None:
    printed = 'rep 1\n  throughput rep 0: 500 wf\n{\n "a": {"b": 1}\n}\n'
    assert peers.last_json_object(printed) == {"a": {"b": 1}}
    assert peers.last_json_object('{"a": 1}') == {"a": 1}
    with pytest.raises(peers.PeersError, match="no JSON object"):
        peers.last_json_object("worker did not start\n")


def test_a_missing_harness_is_one_clear_error() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--dbos-harness", "/nonexistent/x.py"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "DBOS harness not found at /nonexistent/x.py (pass --dbos-harness PATH" in done.stderr
    assert "Traceback" not in done.stderr


def test_postgres_cpu_of_one_cluster() -> None:
    """e2e_bench --pg-pid counts the benchmark's cluster only, not every postgres on a
    shared machine (here: the tests' cluster, a part of all postgres processes)."""
    url = pg.require_cluster().url
    postmaster = peers.postmaster_pid(url)
    assert postmaster is not None
    with psycopg.connect(url, autocommit=True) as conn:
        # Some CPU in the cluster's backend, so the count is not zero.
        conn.execute("SELECT count(*) FROM generate_series(1, 2000000)")
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert backend is not None
        one = _proc.postgres_cpu_s(postmaster)
        assert one >= _proc.cpu_s(backend[0]) > 0
        # While the connection is open: once it closes, its backend (and its CPU) is gone
        # from the machine-wide count.
        assert one <= _proc.postgres_cpu_s()
    assert _proc.postgres_peak_rss_mib(postmaster) > 0
