"""CPU and memory of processes on this machine, from /proc (Linux), for the benchmarks."""

from __future__ import annotations

import os
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(stat: str) -> tuple[str, list[str]]:
    """(command name, the fields after it) of a /proc/<pid>/stat text."""
    name, rest = stat.split("(", 1)[1].rsplit(")", 1)
    return name, rest.split()


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of one process, all its threads."""
    _, fields = _stat_fields(Path(f"/proc/{pid}/stat").read_text())
    return (int(fields[11]) + int(fields[12])) / _TICKS


def postgres_cpu_s(postmaster: int | None = None) -> float:
    """CPU seconds of every postgres process on this machine (backends and helpers), or
    only of the cluster whose postmaster PID is given (other clusters on a shared machine
    would count too otherwise).

    A cluster on another machine counts 0."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, fields = _stat_fields(stat.read_text())
        except OSError:
            continue  # exited meanwhile
        pid, parent = int(stat.parent.name), int(fields[1])
        if name == "postgres" and postmaster in (None, pid, parent):
            total += int(fields[11]) + int(fields[12])
    return total / _TICKS


def postgres_peak_rss_mib(postmaster: int) -> float:
    """The largest peak RSS (VmHWM) of one live process of the cluster (postmaster or a
    child of it); shared buffers count in each, so the processes are not summed."""
    peaks = [peak_rss_mib(postmaster)]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            _, fields = _stat_fields(stat.read_text())
            if int(fields[1]) == postmaster:
                peaks.append(peak_rss_mib(int(stat.parent.name)))
        except OSError:
            continue  # exited meanwhile
    return max(peaks)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
