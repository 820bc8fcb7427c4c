"""Replayer: golden histories replay against their code; a changed workflow fails with the
precise divergence; every input form; the CLI gate."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from durable_rpc import NondeterminismError, workflow
from durable_rpc.testing import Replayer, ReplayFailedError, load_history
from tests.testing.golden_workflows import WORKFLOWS, GoldenSignal, GoldenTimer, say_hello

ROOT = Path(__file__).resolve().parents[2]
HISTORIES = ROOT / "tests" / "fixtures" / "histories"
NAMES = ["hello_world", "timer", "signal"]


@workflow.defn(name="GoldenHello")
class HelloSkipsGoodbye:
    """Changed: the second activity is now say_hello instead of say_goodbye."""

    @workflow.run
    async def run(self, name: str) -> str:
        first = await workflow.execute_activity(
            say_hello, name, start_to_close_timeout=timedelta(seconds=10)
        )
        second = await workflow.execute_activity(
            say_hello, name, start_to_close_timeout=timedelta(seconds=10)
        )
        return f"{first} {second}"


@workflow.defn(name="GoldenTimer")
class LongerTimer:
    """Changed: sleeps twice as long as the recorded timer."""

    @workflow.run
    async def run(self, hours: float) -> float:
        await workflow.sleep(timedelta(hours=hours * 2))
        return 0.0


@workflow.defn(name="GoldenSignal")
class SignalWithoutActivity:
    """Changed: completes right after the signal, dropping the recorded activity."""

    def __init__(self) -> None:
        self.done = False

    @workflow.signal
    async def approve(self, who: str) -> None:
        self.done = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.done)
        return "approved"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("suffix", [".json", ".pb"])
def test_golden_histories_replay(name: str, suffix: str) -> None:
    result = Replayer(WORKFLOWS).replay(HISTORIES / f"{name}{suffix}")
    assert result.ok, result.describe()
    assert result.error is None


def test_every_input_form_is_accepted() -> None:
    path = HISTORIES / "timer.json"
    message = load_history(path)
    replayer = Replayer([GoldenTimer], raise_on_failure=True)
    for form in (path, str(path), path.read_text(), path.read_bytes(), message):
        assert replayer.replay(form).ok
    assert replayer.replay(message.SerializeToString()).ok
    assert load_history(HISTORIES / "timer.pb") == message


@pytest.mark.parametrize(
    ("workflows", "name", "seq", "expected", "actual"),
    [
        (
            [HelloSkipsGoodbye],
            "hello_world",
            2,
            'ScheduleActivity(seq=2, type="say_goodbye")',
            'ScheduleActivity(seq=2, type="say_hello")',
        ),
        ([LongerTimer], "timer", 1, "StartTimer(seq=1, duration=86400s)", None),
        ([SignalWithoutActivity], "signal", 1, None, "CompleteWorkflow"),
    ],
)
def test_changed_workflow_fails_with_the_divergence(
    workflows: list[type], name: str, seq: int, expected: str | None, actual: str | None
) -> None:
    result = Replayer(workflows, raise_on_failure=False).replay(HISTORIES / f"{name}.json")
    assert not result.ok
    error = result.nondeterminism
    assert isinstance(error, NondeterminismError)
    assert error.seq == seq
    if expected is not None:
        assert error.expected == expected
    if actual is not None:
        assert error.actual == actual
    assert error.expected != error.actual


def test_precise_divergence_of_a_longer_timer() -> None:
    replayer = Replayer([LongerTimer], raise_on_failure=False)
    error = replayer.replay(HISTORIES / "timer.json").nondeterminism
    assert error is not None
    assert (error.seq, error.expected, error.actual) == (
        1,
        "StartTimer(seq=1, duration=86400s)",
        "StartTimer(seq=1, duration=172800s)",
    )


def test_replay_all_reports_every_failure_and_raises_once() -> None:
    files = [HISTORIES / f"{name}.json" for name in NAMES]
    returning = Replayer([HelloSkipsGoodbye, GoldenTimer, GoldenSignal], raise_on_failure=False)
    assert [r.ok for r in returning.replay_all(files)] == [False, True, True]
    with pytest.raises(ReplayFailedError) as caught:
        Replayer([HelloSkipsGoodbye, LongerTimer, GoldenSignal]).replay_all(files)
    assert [r.workflow_type for r in caught.value.results] == ["GoldenHello", "GoldenTimer"]
    assert "nondeterminism at seq 2" in str(caught.value)


def test_divergence_raises_by_default() -> None:
    """A test that replays and forgets to look at the result still fails."""
    with pytest.raises(ReplayFailedError) as caught:
        Replayer([LongerTimer]).replay(HISTORIES / "timer.json")
    error = caught.value.nondeterminism
    assert error is not None and error.seq == 1
    assert caught.value.__cause__ is error  # the traceback shows the divergence itself
    assert "nondeterminism at seq 1" in str(caught.value)
    assert Replayer([GoldenTimer]).replay(HISTORIES / "timer.json").ok  # no divergence


def test_unknown_workflow_type_is_a_failure_not_a_crash() -> None:
    with pytest.raises(ReplayFailedError, match="GoldenSignal"):
        Replayer([GoldenTimer]).replay(HISTORIES / "signal.json")
    result = Replayer([GoldenTimer], raise_on_failure=False).replay(HISTORIES / "signal.json")
    assert not result.ok
    assert isinstance(result.error, LookupError)
    assert "GoldenSignal" in str(result.error)


def test_cli_replay_gate(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "durable_rpc.cli", "replay", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )

    files = [str(HISTORIES / f"{name}.json") for name in NAMES]
    ok = run(*files, "--module", "tests.testing.golden_workflows")
    assert ok.returncode == 0, ok.stderr
    assert "3 replayed, 0 failed" in ok.stdout
    bad = run(*files, "-m", "tests.testing.test_replayer")
    assert bad.returncode == 1
    assert "nondeterminism at seq 2" in bad.stdout
