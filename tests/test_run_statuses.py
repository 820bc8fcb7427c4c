"""The one list of run statuses: every WorkflowStatus a run can have, named as the store
keeps it, and the same list wherever a user picks a status (CLI, store filter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.run_statuses import STATUS_NAMES, STATUS_VALUES, STATUSES
from durable_rpc.store import RUN_STATUSES
from durable_rpc.store._run_filter import run_filter
from durable_rpc.v1 import service_pb2


def test_every_status_but_unspecified_has_a_name_and_back() -> None:
    values = set(service_pb2.WorkflowStatus.values()) - {0}
    assert set(STATUS_VALUES.values()) == values
    assert STATUSES[0] == "running" and "continued_as_new" in STATUSES
    for name, value in STATUS_VALUES.items():
        assert STATUS_NAMES[value] == name
        assert service_pb2.WorkflowStatus.Name(value) == "WORKFLOW_STATUS_" + name.upper()
    assert set(STATUSES) == RUN_STATUSES


def test_the_cli_offers_exactly_these_statuses() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "durable_rpc.cli", "workflow", "list", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    offered = out.split("--status [", 1)[1].split("]", 1)[0]
    assert [s.strip() for s in offered.replace("\n", " ").split("|")] == list(STATUSES)


def test_the_store_filter_takes_each_status_and_refuses_another() -> None:
    for name in STATUSES:
        where, params = run_filter("default", name, None, None, None, None)
        assert "status = ?" in where and name in params
    with pytest.raises(InvalidArgumentError, match="unknown status 'stuck'"):
        run_filter("default", "stuck", None, None, None, None)
