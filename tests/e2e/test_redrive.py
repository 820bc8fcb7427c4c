"""Redrive across a fixed bug, against a real server process and real worker
processes: a run fails in activity 3 of 4, a worker with the fixed activity (the same
workflow code, so the same definition fingerprint) replaces the buggy one, and the
redriven run completes with activities 1 and 2 not run again."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_rpc import Client
from durable_rpc.client import WorkflowFailureError
from durable_rpc.errors import WorkflowAlreadyStartedError, WorkflowNotFailedError
from tests.cli_process import run_cli_async
from tests.e2e.conftest import ROOT, ServerProcess

QUEUE = "redrive"


class RedriveWorker:
    """``tests.e2e.redrive_app`` as a worker process, buggy or fixed."""

    def __init__(self, address: str, log: Path, tmp_path: Path, *, fixed: bool) -> None:
        out = tmp_path / f"worker-{'fixed' if fixed else 'buggy'}.log"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "DURABLE_RPC_TEST_LOG": str(log)}
        with out.open("wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.e2e.redrive_app", address, QUEUE]
                + (["--fixed"] if fixed else []),
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=env,
            )

    def stop(self) -> None:
        """SIGTERM: the supervisor drains what it started and exits."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[RedriveWorker]]:
    started: list[RedriveWorker] = []
    yield started
    for worker in started:
        worker.stop()


def executions(log: Path) -> collections.Counter[str]:
    """Executions of each (order, step), from the activity log."""
    lines = log.read_text().splitlines() if log.exists() else []
    return collections.Counter(line.split()[0].removeprefix("order_step:") for line in lines)


def keys(log: Path, order: str) -> set[str]:
    """The keys the executions of ``order``'s steps were given."""
    return {
        line.split("key=")[1].split()[0]
        for line in log.read_text().splitlines()
        if line.startswith(f"order_step:{order}:")
    }


async def test_redrive_completes_a_run_after_the_fix_without_rerunning_steps_1_and_2(
    server: ServerProcess, client: Client, tmp_path: Path, workers: list[RedriveWorker]
) -> None:
    log = tmp_path / "activities.log"
    workers.append(RedriveWorker(server.address, log, tmp_path, fixed=False))
    handles = [
        await client.start_workflow("FourSteps", order, id=order, task_queue=QUEUE)
        for order in ("order-1", "order-2")
    ]
    for handle in handles:
        with pytest.raises(WorkflowFailureError, match="step 3 of"):
            await handle.result(timeout=60)
    workers[0].stop()
    before = executions(log)
    for order in ("order-1", "order-2"):
        assert [before[f"{order}:{n}"] for n in (1, 2, 3, 4)] == [1, 1, 1, 0]

    # The fix is deployed: same workflow code, the activity no longer fails.
    workers.append(RedriveWorker(server.address, log, tmp_path, fixed=True))
    failed = handles[0]
    redriven = await failed.redrive(request_id="redrive-order-1")
    assert redriven.started and redriven.kept_activities == 2
    assert redriven.handle.run_id != failed.run_id
    assert await redriven.handle.result(timeout=60) == [
        f"order-1: step {n} done" for n in (1, 2, 3, 4)
    ]

    # order-2 through the CLI, by workflow id alone (its latest run, the failed one).
    cli = await run_cli_async("workflow", "redrive", "order-2", "--json", address=server.address)
    assert cli.returncode == 0, cli.stderr
    answer = json.loads(cli.stdout)
    assert (answer["started"], answer["kept_activities"]) == (True, 2)
    assert await client.get_handle("order-2", answer["run_id"]).result(timeout=60) == [
        f"order-2: step {n} done" for n in (1, 2, 3, 4)
    ]

    # Activities 1 and 2 ran once, in the failed runs; 3 and 4 once in the new ones.
    after = executions(log)
    for order in ("order-1", "order-2"):
        assert [after[f"{order}:{n}"] for n in (1, 2, 3, 4)] == [1, 1, 2, 1], after
        # The new run replayed the failed run's first decision with its draws: every step
        # got the key that decision drew (workflow.random() is seeded from the first run).
        assert len(keys(log, order)) == 1, keys(log, order)

    # Linked both ways in describe; the failed run stays failed.
    old_view = await failed.describe()
    new_view = await redriven.handle.describe()
    assert (old_view.info.status, old_view.redriven_by_run_id) == (
        "failed",
        redriven.handle.run_id,
    )
    assert (new_view.info.status, new_view.redriven_from_run_id) == (
        "completed",
        failed.run_id,
    )
    cli = await run_cli_async(
        "workflow", "describe", "order-1", "--run-id", failed.run_id, "--json",
        address=server.address,
    )  # fmt: skip
    assert json.loads(cli.stdout)["redriven_by_run_id"] == redriven.handle.run_id

    # The same request again: the same new run. Another request: refused, with reasons.
    again = await failed.redrive(request_id="redrive-order-1")
    assert (again.handle.run_id, again.started) == (redriven.handle.run_id, False)
    with pytest.raises(WorkflowAlreadyStartedError, match="already redriven"):
        await failed.redrive()
    with pytest.raises(WorkflowNotFailedError, match="completed"):
        await redriven.handle.redrive()
    cli = await run_cli_async("workflow", "redrive", "order-1", address=server.address)
    assert cli.returncode != 0 and "WORKFLOW_NOT_FAILED" in cli.stderr + cli.stdout
