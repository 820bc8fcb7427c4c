"""Markers: the kinds the runtime records, the RecordMarker command, and the two kinds
workflow code records itself, side effects, patches and versions (see docs/engine.md)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from durable_rpc import converter
from durable_rpc._core import NondeterminismError
from durable_rpc.v1 import workflow_task_pb2
from durable_rpc.workflow import _sandbox
from durable_rpc.workflow._errors import WorkflowTaskError
from durable_rpc.workflow._instance import InstanceState

#: Marker kinds (MarkerRecorded.kind / RecordMarker.kind).
SIDE_EFFECT_MARKER = "side_effect"
PATCH_MARKER = "patch"
VERSION_MARKER = "version"
LOCAL_ACTIVITY_MARKER = "local_activity"
# Marker id of a local activity that failed for good (its payload is the failure).
LOCAL_ACTIVITY_FAILED = "failed"
#: What get_version() returns for a history recorded before the call existed.
DEFAULT_VERSION = -1


class _ReplayDivergedError(BaseException):
    """Stops workflow code that, during replay, reached a side effect its history did
    not record. A BaseException so ``except Exception`` in workflow code cannot swallow
    it; the marker command was emitted first, so the replay machine reports the
    divergence as a NondeterminismError (seq, expected, actual)."""


class MarkersMixin(InstanceState):
    """side_effect() and patched(): decided once live, answered from history on replay."""

    def side_effect(self, fn: Callable[[], Any], result_hint: Any) -> Any:
        """Run ``fn`` once and record its value (a marker taking the next seq); during
        replay return the recorded value without calling ``fn``.

        ``fn`` raising, returning an awaitable or returning something the converter
        cannot encode fails the workflow *task* (the run stays open and the task is
        retried): recording nothing while the code carries on would make the next replay
        diverge."""
        seq = self._take_seq()
        if self.is_replaying:
            data = self._recorded_side_effects.get(seq)
            if data is None:
                # The replayed task recorded no side effect at this seq: the code
                # changed. Never call fn for a replay that cannot match; emit the marker
                # so the replay machine names the divergence, and stop this coroutine.
                self._emit(marker_command(seq, SIDE_EFFECT_MARKER, "", None))
                raise _ReplayDivergedError(f"side effect seq {seq} is not in the history")
            # Matched against the recorded marker (kind, seq, id) by the replay machine.
            self._emit(marker_command(seq, SIDE_EFFECT_MARKER, "", data))
        else:
            try:
                # fn may do what workflow code may not (read the clock, draw a uuid):
                # its value is recorded and never recomputed.
                with _sandbox.unrestricted():
                    value = fn()
                if inspect.isawaitable(value):
                    if inspect.iscoroutine(value):
                        value.close()
                    raise TypeError("side_effect takes a synchronous function")
                data = converter.encode(value)
            except Exception as exc:
                error = WorkflowTaskError(
                    f"side_effect function {getattr(fn, '__qualname__', fn)!r} (seq {seq}) "
                    f"failed: {exc!r}; nothing was recorded, the workflow task fails"
                )
                self.loop.violation = self.loop.violation or error
                raise error from exc
            self._emit(marker_command(seq, SIDE_EFFECT_MARKER, "", data))
        # Decoded on first execution too, so both return exactly the same value.
        return converter.decode(data, result_hint)

    def patch(self, change_id: str) -> bool:
        """Whether the run takes the patched branch of ``change_id``.

        Live code records one patch marker per change id and takes the new branch.
        During replay the answer is whether the replayed task recorded the marker
        (an old history without it takes the old branch and emits nothing). The first
        answer holds for the rest of the run. Patch markers take no seq, so adding a
        patched() call never shifts the seqs of later commands."""
        if not change_id:
            raise ValueError("change_id must not be empty")
        decided = self._patches.get(change_id)
        if decided is not None:
            return decided
        use_patch = not self.is_replaying or change_id in self._recorded_patches
        self._patches[change_id] = use_patch
        if use_patch:
            self._emit(marker_command(0, PATCH_MARKER, change_id, None))
        return use_patch

    def get_version(self, change_id: str, min_supported: int, max_supported: int) -> int:
        """The version of ``change_id`` this run follows, in [min_supported, max_supported].

        Live code records one version marker per change id holding ``max_supported`` (no
        seq, like a patch marker, so adding the call never shifts later seqs). During
        replay the answer is the version the replayed task recorded, or DEFAULT_VERSION
        when it recorded none (the history predates the call). The first answer holds
        for the rest of the run; a version outside the range the code supports is a
        nondeterminism error that fails the workflow task (never the workflow)."""
        if not change_id:
            raise ValueError("change_id must not be empty")
        for name, value in (("min_supported", min_supported), ("max_supported", max_supported)):
            if isinstance(value, bool) or not isinstance(value, int) or value < DEFAULT_VERSION:
                raise ValueError(f"{name} must be an int >= DEFAULT_VERSION (-1), got {value!r}")
        if min_supported > max_supported:
            raise ValueError(
                f"min_supported {min_supported} is above max_supported {max_supported}"
            )
        version = self._versions.get(change_id)
        if version is None:
            if not self.is_replaying:
                version = max_supported
                self._emit(marker_command(0, VERSION_MARKER, change_id, converter.encode(version)))
            elif (data := self._recorded_versions.get(change_id)) is not None:
                version = converter.decode(data, int)
                # Matched against the recorded marker (kind, id) by the replay machine.
                self._emit(marker_command(0, VERSION_MARKER, change_id, data))
            else:
                version = DEFAULT_VERSION
            self._versions[change_id] = version
        if not min_supported <= version <= max_supported:
            # A run recorded (or predating) a version this code no longer supports: its
            # branch was deleted, so going on would diverge somewhere less legible.
            error = NondeterminismError(
                0,
                f"Version(id={_quoted(change_id)}, version={version})",
                f"GetVersion(id={_quoted(change_id)}, "
                f"supported=[{min_supported}, {max_supported}])",
            )
            self.loop.violation = self.loop.violation or error
            raise error
        return version


def _quoted(text: str) -> str:
    """``text`` in double quotes, as the replay machine's descriptions quote ids."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def marker_command(
    seq: int, kind: str, marker_id: str, data: bytes | None, details: bytes = b""
) -> workflow_task_pb2.Command:
    marker = workflow_task_pb2.RecordMarker(kind=kind, id=marker_id)
    if data is not None:
        marker.payload.data = data
    if details:
        marker.details.data = details
    return workflow_task_pb2.Command(seq=seq, record_marker=marker)
