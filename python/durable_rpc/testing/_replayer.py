"""Offline replay of recorded histories against the current workflow code.

A deploy that changes workflow code in a way existing runs cannot follow (a reordered
activity, a new timer, a removed branch) only shows up when a worker replays an open
run's history — in production. The replayer does that replay ahead of time, through the
very function workers use (``worker._workflow_task.replay``), so a CI job can refuse the
change. No server is involved.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from durable_rpc._core import NondeterminismError
from durable_rpc.client._payload_codec import decode as decode_payloads
from durable_rpc.codec import PayloadCodec
from durable_rpc.testing._history import HistoryLike, load_history
from durable_rpc.v1 import history_pb2
from durable_rpc.worker._workflow_task import replay
from durable_rpc.workflow._definition import WorkflowDefinition, definition_of


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The outcome of replaying one history.

    ``error`` is None when the code followed the history. On divergence it is the
    :class:`durable_rpc.NondeterminismError` (``seq``, ``expected``, ``actual``); other
    failures (an unknown workflow type, a malformed history, the workflow code raising
    at task level) are kept as the exception raised.
    """

    source: str
    workflow_type: str
    workflow_id: str
    run_id: str
    error: Exception | None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def nondeterminism(self) -> NondeterminismError | None:
        return self.error if isinstance(self.error, NondeterminismError) else None

    def describe(self) -> str:
        """One line for humans and CI logs."""
        what = f"{self.source}: {self.workflow_type} {self.workflow_id}/{self.run_id}"
        return f"{what}: ok" if self.error is None else f"{what}: {self.error}"


class ReplayFailedError(AssertionError):
    """Raised when a replay fails (the default); ``results`` holds every failed replay.

    An AssertionError, so a test that replays a history fails on divergence without
    looking at anything; ``nondeterminism`` is the first divergence, if any.
    """

    def __init__(self, results: Sequence[ReplayResult]) -> None:
        self.results = list(results)
        super().__init__("\n".join(r.describe() for r in self.results))

    @property
    def nondeterminism(self) -> NondeterminismError | None:
        return next((r.nondeterminism for r in self.results if r.nondeterminism), None)


class Replayer:
    """Replays histories against ``workflows`` (``@workflow.defn`` classes).

    The definition is chosen by the history's ``workflow_type`` and ``workflow_version``,
    the way a worker chooses it. A failed replay (a divergence, an unknown workflow, a
    malformed history) raises :class:`ReplayFailedError`, as Temporal's replayer does: a
    result returned with its error unread would let a test pass. ``raise_on_failure=False``
    returns the failures as results instead (a gate that reports them all, like
    ``durable-rpc replay``). ``payload_codec``: the codec the workers used, for histories
    exported as stored (encrypted, compressed payloads); a payload it cannot decode
    fails that history's replay with the codec's reason.
    """

    def __init__(
        self,
        workflows: Iterable[type],
        *,
        raise_on_failure: bool = True,
        payload_codec: PayloadCodec | None = None,
    ) -> None:
        # A history exported as stored holds what the workers' codec produced: decoded
        # with the same codec (its keys) before replay.
        self.payload_codec = payload_codec
        self._definitions: dict[tuple[str, str], WorkflowDefinition] = {}
        for cls in workflows:
            definition = definition_of(cls)
            self._definitions[(definition.name, definition.version)] = definition
        self.raise_on_failure = raise_on_failure

    def replay(self, history: HistoryLike, *, source: str | None = None) -> ReplayResult:
        """Replay one history: a ``History``, its bytes, its protobuf JSON, or a path."""
        if source is None:
            source = _path_of(history) or "<history>"
        result = self._replay(load_history(history), source)
        if self.raise_on_failure and not result.ok:
            raise ReplayFailedError([result]) from result.error
        return result

    def replay_all(self, histories: Iterable[HistoryLike]) -> list[ReplayResult]:
        """Replay every history (a deploy gate); on failure raises once, after all of
        them ran, listing every failure (``raise_on_failure=False``: returns them)."""
        results: list[ReplayResult] = []
        for history in histories:
            source = _path_of(history) or f"<history #{len(results)}>"
            try:
                loaded = load_history(history)
            except (OSError, ValueError) as exc:
                results.append(ReplayResult(source, "", "", "", exc))
                continue
            results.append(self._replay(loaded, source))
        failed = [r for r in results if not r.ok]
        if self.raise_on_failure and failed:
            raise ReplayFailedError(failed)
        return results

    def _replay(self, history: history_pb2.History, source: str) -> ReplayResult:
        if not history.events or history.events[0].WhichOneof("attributes") != "workflow_started":
            return ReplayResult(source, "", "", "", ValueError("event 1 is not workflow_started"))
        started = history.events[0].workflow_started
        version = started.workflow_version or "1"
        ident = (source, started.workflow_type, started.workflow_id, started.run_id)
        definition = self._definitions.get((started.workflow_type, version))
        if definition is None:
            known = ", ".join(f"{n} v{v}" for n, v in sorted(self._definitions)) or "none"
            missing = LookupError(
                f"no workflow {started.workflow_type!r} version {version!r} (known: {known})"
            )
            return ReplayResult(*ident, missing)
        # The final activation (if the run is open) sees the time of the last event, so
        # replay is deterministic for a given file.
        last_time_ms = history.events[-1].event_time.ToMilliseconds()
        try:
            if self.payload_codec is not None:
                plain = history_pb2.History()
                plain.CopyFrom(history)  # the caller's history stays as stored
                decode_payloads(self.payload_codec, plain)
                history = plain
            replay(
                definition,
                history.SerializeToString(),
                last_time_ms,
                task_queue=started.task_queue,
            )
        except Exception as exc:  # every failure is a result; the gate reports them all
            return ReplayResult(*ident, exc)
        return ReplayResult(*ident, None)


def _path_of(history: HistoryLike) -> str | None:
    """The path ``history`` names, if it is one (a str that is not JSON text)."""
    if isinstance(history, os.PathLike):
        return os.fspath(history)
    if isinstance(history, str) and not history.lstrip().startswith("{"):
        return history
    return None
