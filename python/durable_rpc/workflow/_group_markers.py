"""The markers of parallel groups and selections (docs/engine.md, "Parallel groups and
selections"): one per group, recording its membership, and one per decided selection,
recording its winner so that replay takes the recorded winner whatever the code would
pick now."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from durable_rpc import converter
from durable_rpc._core import NondeterminismError
from durable_rpc.workflow import _members
from durable_rpc.workflow._instance import InstanceState
from durable_rpc.workflow._markers import _ReplayDivergedError, marker_command
from durable_rpc.workflow._members import Key

#: Marker kinds (also accepted by the store, store/_logic.py).
PARALLEL_MARKER = "parallel"
SELECTION_MARKER = "selection"
SELECTION_WINNER_MARKER = "selection_winner"


class GroupsMixin(InstanceState):
    """Group and winner markers: emitted live, matched against history on replay."""

    def record_group(self, kind: str, keys: Sequence[Key]) -> int:
        """Emit the marker of a new group (it takes the next seq, the group's id) with
        its member keys and the enclosing member, if any; returns the seq."""
        seq = self._take_seq()
        parent_seq, parent_key = _members.parent()
        data = converter.encode({"keys": list(keys), "parent": parent_seq, "key": parent_key})
        self._emit(marker_command(seq, kind, "", data))
        return seq

    def record_winner(self, selection_seq: int, chosen: Key, settled: Callable[[Key], bool]) -> Key:
        """Record ``chosen`` as the winner of selection ``selection_seq`` (a marker
        taking the next seq); during replay, return the recorded winner instead, which
        must have settled by now."""
        seq = self._take_seq()
        marker_id = str(selection_seq)
        if not self.is_replaying:
            self._emit(
                marker_command(seq, SELECTION_WINNER_MARKER, marker_id, converter.encode(chosen))
            )
            return chosen
        data = self._recorded_winners.get(seq)
        if data is None:
            # The replayed task decided no selection here: the code changed. The marker
            # lets the replay machine name the divergence; nothing after it may run.
            self._emit(marker_command(seq, SELECTION_WINNER_MARKER, marker_id, None))
            raise _ReplayDivergedError(f"selection winner seq {seq} is not in the history")
        self._emit(marker_command(seq, SELECTION_WINNER_MARKER, marker_id, data))
        recorded = converter.decode(data)
        if not isinstance(recorded, int | str) or not settled(recorded):
            error = NondeterminismError(
                seq,
                f"SelectionWinner(selection={selection_seq}, key={recorded!r})",
                f"SelectionWinner(selection={selection_seq}, key={chosen!r}; "
                f"{recorded!r} has not finished)",
            )
            self.loop.violation = self.loop.violation or error
            raise error
        return recorded
