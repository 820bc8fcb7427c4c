"""`durable-rpc schedule ...` against a real server process: create, describe, list,
pause/unpause, trigger, backfill, delete, and a bad cron's stable reason."""

from __future__ import annotations

import json

from tests.cli_process import checked, run_cli
from tests.e2e.conftest import ServerProcess


def cli(server: ServerProcess, *args: str) -> str:
    return checked(run_cli(*args, address=server.address))


def test_schedule_commands(server: ServerProcess) -> None:
    cli(
        server,
        "schedule",
        "create",
        "nightly",
        "--workflow",
        "Report",
        "--task-queue",
        "q",
        "--cron",
        "0 2 * * *",
        "--timezone",
        "Europe/Berlin",
        "--input",
        '["eu"]',
    )
    described = json.loads(cli(server, "schedule", "describe", "nightly", "--json"))
    schedule = described["schedule"]
    assert schedule["definition"]["spec"]["cron"] == "0 2 * * *"
    assert len(schedule["nextDueTimes"]) == 5
    assert "nightly" in cli(server, "schedule", "list")
    assert "paused" in cli(server, "schedule", "pause", "nightly", "--note", "migration")
    paused = json.loads(cli(server, "schedule", "describe", "nightly", "--json"))["schedule"]
    assert (paused["paused"], paused["note"]) == (True, "migration")
    cli(server, "schedule", "unpause", "nightly")
    assert "started" in cli(server, "schedule", "trigger", "nightly")
    out = cli(
        server,
        "schedule",
        "backfill",
        "nightly",
        "--start",
        "2026-01-01T00:00:00Z",
        "--end",
        "2026-01-03T12:00:00Z",
    )
    assert "3 runs started" in out  # 02:00 Berlin on Jan 1, 2 and 3
    assert "deleted" in cli(server, "schedule", "delete", "nightly")
    assert "nightly" not in cli(server, "schedule", "list")


def test_schedule_errors_name_their_reason(server: ServerProcess) -> None:
    bad = run_cli(
        "schedule",
        "create",
        "x",
        "--workflow",
        "W",
        "--task-queue",
        "q",
        "--cron",
        "every day",
        address=server.address,
    )
    assert bad.returncode != 0 and "INVALID_ARGUMENT" in bad.stderr, bad.stderr
    missing = run_cli("schedule", "trigger", "nope", address=server.address)
    assert missing.returncode != 0 and "NOT_FOUND" in missing.stderr, missing.stderr


def test_schedule_overlap_buffer_all_and_cancel_other(server: ServerProcess) -> None:
    for overlap in ("buffer_all", "cancel_other"):
        cli(
            server,
            "schedule",
            "create",
            overlap,
            "--workflow",
            "Report",
            "--task-queue",
            "q",
            "--interval",
            "1h",
            "--overlap",
            overlap,
        )
        assert overlap.upper() in cli(server, "schedule", "list")
        assert "started" in cli(server, "schedule", "trigger", overlap)
        # The first run is open (no worker here): the second trigger waits for it.
        assert "buffered" in cli(server, "schedule", "trigger", overlap)
        described = json.loads(cli(server, "schedule", "describe", overlap, "--json"))
        schedule = described["schedule"]
        assert schedule["definition"]["overlap"] == f"SCHEDULE_OVERLAP_{overlap.upper()}"
        assert [a["action"] for a in schedule["recentActions"]] == ["buffered", "started"]
