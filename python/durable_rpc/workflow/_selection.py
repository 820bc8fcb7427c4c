"""``workflow.selection``: a durable first-completion selection whose members stay
reachable through handles: after the winner, each other member can be awaited or
cancelled explicitly (unlike ``workflow.select``, nothing is cancelled by itself)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_rpc.workflow import _members
from durable_rpc.workflow._group_markers import SELECTION_MARKER
from durable_rpc.workflow._members import UNKNOWN_KEY, Key, Member, ParallelGroupError

if TYPE_CHECKING:
    from durable_rpc.workflow._runtime import WorkflowInstance


@dataclass(frozen=True)
class SelectionResult:
    """The winner of a selection: its ``key`` and its ``value``."""

    key: Key
    value: Any


class DurableOperationCancelled(Exception):
    """Raised by ``DurableOperationHandle.result()`` for a member that ended cancelled
    (through its handle, or ``first(cancel_losers=True)``); ``key`` names it. Also by
    ``Selection.first()`` when every member was cancelled before one finished."""

    def __init__(self, key: Key | None, message: str) -> None:
        super().__init__(message)
        self.key = key


class DurableOperationHandle:
    """One member of a selection, by its key (``Selection.handle(key)``)."""

    def __init__(self, key: Key, member: Member, task: asyncio.Task[Any]) -> None:
        self.key = key
        self._member = member
        self._task = task

    def done(self) -> bool:
        """Whether the member has ended (completed, failed or cancelled)."""
        return self._task.done()

    async def result(self) -> Any:
        """Wait for the member and return its result (raise its error). A member that
        ended cancelled raises :class:`DurableOperationCancelled`. Cancelling the
        awaiting code stops the wait, never the member."""
        await asyncio.wait({self._task})
        if self._task.cancelled():
            raise DurableOperationCancelled(
                self.key, f"selection member {self.key!r} was cancelled"
            )
        return self._task.result()

    async def cancel(self) -> bool:
        """Cancel the member's code, as ``task.cancel()`` would (an activity gets a
        RequestCancelActivity, a timer a CancelTimer, each under its call's cancellation
        policy), and wait until that code ended. True when it ended cancelled; False
        when it had finished, or finished despite the request (its result stays:
        cancellation never undoes a completed effect). A member cancelled through its
        handle never wins the selection."""
        if self._task.done():
            return False
        self._member.cancel_requested = True
        self._task.cancel()
        await asyncio.wait({self._task})
        return self._task.cancelled()


class Selection:
    """What :func:`selection` returns: its members are already running."""

    def __init__(
        self, runtime: WorkflowInstance, members: list[tuple[Key, Awaitable[Any]]]
    ) -> None:
        self._runtime = runtime
        self.keys: tuple[Key, ...] = tuple(key for key, _ in members)
        self._seq = runtime.record_group(SELECTION_MARKER, self.keys)
        self._handles: dict[Key, DurableOperationHandle] = {}
        for key, operation in members:
            member = Member(self._seq, key)
            self._handles[key] = DurableOperationHandle(
                key, member, _members.start(runtime, member, operation)
            )
        self._winner: Key | None = None

    @property
    def winner(self) -> Key | None:
        """The winner's key once :meth:`first` decided it (None before)."""
        return self._winner

    def handle(self, key: Key) -> DurableOperationHandle:
        """The handle of member ``key`` (ParallelGroupError UNKNOWN_KEY otherwise)."""
        try:
            return self._handles[key]
        except KeyError:
            raise ParallelGroupError(
                UNKNOWN_KEY, f"the selection has no member {key!r} (keys: {list(self.keys)})"
            ) from None

    def _contender(self, key: Key) -> bool:
        handle = self._handles.get(key)
        return handle is not None and handle.done() and not handle._member.cancel_requested

    def _decided(self) -> bool:
        return any(map(self._contender, self.keys)) or all(h.done() for h in self._handles.values())

    async def first(self, *, cancel_losers: bool = False) -> SelectionResult:
        """Wait for the first member to end (in history order) and return it as a
        :class:`SelectionResult`; raise its error when it failed. The winner is recorded
        (a ``selection_winner`` marker), so a replay takes the recorded winner even if
        the code would now pick another. Calling it again returns the same winner.
        ``cancel_losers=True`` cancels the members still running (not awaited)."""
        if self._winner is None:
            # Checked once the workflow's coroutines are all blocked (even when a member
            # ended already): every member the activation's jobs end has ended by then,
            # so the ranking sees them all, whatever order their code ran in.
            await self._runtime.wait_condition(self._decided)
            contenders = [key for key in self.keys if self._contender(key)]
            if not contenders:
                raise DurableOperationCancelled(
                    None, "every member of the selection was cancelled before one finished"
                )
            order = {key: index for index, key in enumerate(self.keys)}
            chosen = min(
                contenders,
                key=lambda k: (self._handles[k]._member.ended_at or (1 << 62, 0), order[k]),
            )
            self._winner = self._runtime.record_winner(self._seq, chosen, self._contender)
        if cancel_losers:
            for key, handle in self._handles.items():
                if key != self._winner and not handle.done():
                    handle._member.cancel_requested = True
                    handle._task.cancel()
        return SelectionResult(self._winner, await self._handles[self._winner].result())


def selection(
    operations: Iterable[Awaitable[Any]] | Mapping[str, Awaitable[Any]] | None = None,
    /,
    **named: Awaitable[Any],
) -> Selection:
    """Start ``operations`` (a list: keys 0, 1, ...; a mapping or keywords: string
    keys) now, as one durable selection::

        sel = workflow.selection(fast=workflow.execute_activity(a, ...),
                                 slow=workflow.execute_activity(b, ...))
        first = await sel.first()            # SelectionResult(key="fast", value=...)
        late = await sel.handle("slow").result()   # or: await ....cancel()

    A ``selection`` marker records the keys; the winner (the first member to end, in
    history order; the earliest key on a tie) is recorded by ``first()``. Losers keep
    running until awaited, cancelled, or the run ends. Invalid members raise
    :class:`ParallelGroupError` before any command, as for :func:`parallel`.
    """
    from durable_rpc.workflow._api import current

    runtime = current()
    members, _ = _members.collect("selection()", operations, named)
    return Selection(runtime, members)
