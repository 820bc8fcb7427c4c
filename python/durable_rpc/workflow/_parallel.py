"""``workflow.parallel``: a deterministic join of activities, children, timers and nested
groups, with results in input order and a partial failure that keeps what succeeded."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from durable_rpc.sessions import SessionOptions
from durable_rpc.workflow import _members
from durable_rpc.workflow._group_markers import PARALLEL_MARKER
from durable_rpc.workflow._members import Key, Member, Path


@dataclass(frozen=True)
class ParallelCompletion:
    """One successful leaf of a group that failed: its ``path`` (its key in each
    enclosing group, outermost first; ``key`` is the last) and its ``result``."""

    path: Path
    result: Any

    @property
    def key(self) -> Key:
        return self.path[-1]


@dataclass(frozen=True)
class ParallelMemberFailure:
    """One failed leaf of a group: its ``path`` and the ``error`` it raised."""

    path: Path
    error: BaseException

    @property
    def key(self) -> Key:
        return self.path[-1]


class ParallelFailure(Exception):
    """A parallel group finished with at least one failed member.

    Every member ran to its end first (the group never cancels its members). ``error``
    and ``path`` are the first failed leaf in input order (a nested group's leaves in
    their place), also the ``__cause__``; ``failures`` lists every failed leaf and
    ``completions`` every successful one, both in input order. All of it follows from
    the members' outcomes alone, so a replay raises the identical failure.
    """

    def __init__(
        self, failures: list[ParallelMemberFailure], completions: list[ParallelCompletion]
    ) -> None:
        first = failures[0]
        super().__init__(
            f"parallel member {_show(first.path)} failed: {type(first.error).__name__}: "
            f"{first.error} ({len(failures)} failed, {len(completions)} completed)"
        )
        self.path = first.path
        self.error = first.error
        self.failures = tuple(failures)
        self.completions = tuple(completions)
        self.__cause__ = first.error


def _show(path: Path) -> str:
    return "/".join(str(key) for key in path)


class ParallelCall(Awaitable[Any]):
    """What :func:`parallel` returns: await it (once) to run the group. Not started
    until awaited, so it can be a member of another group."""

    def __init__(
        self,
        members: list[tuple[Key, Awaitable[Any]]],
        keyed: bool,
        session: SessionOptions | None = None,
    ) -> None:
        self.members = members
        self._keyed = keyed
        self._session = session
        self._started = False
        #: The successful leaves once the group ended (read by an enclosing group).
        self.completions: list[ParallelCompletion] = []

    def close_unstarted(self) -> None:
        """Close the members of a group that will never run."""
        if not self._started:
            self._started = True
            _members.close(aw for _, aw in self.members)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._join().__await__()

    async def _join(self) -> Any:
        from durable_rpc.workflow._api import current

        if self._started:
            raise RuntimeError("a parallel group can be awaited only once")
        self._started = True
        runtime = current()
        seq = runtime.record_group(PARALLEL_MARKER, [key for key, _ in self.members])
        tasks = [
            _members.start(runtime, Member(seq, key, session=self._session), operation)
            for key, operation in self.members
        ]
        pending = set(tasks)
        try:
            while pending:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                # ContinueAsNewError and the runtime's own BaseExceptions end the code
                # at once, as they would without a group.
                for task in tasks:
                    if task.done() and not task.cancelled():
                        error = task.exception()
                        if error is not None and not isinstance(error, Exception):
                            raise error
        except BaseException:
            for task in pending:
                task.cancel()
            raise
        return self._outcome(tasks)

    def _outcome(self, tasks: list[asyncio.Task[Any]]) -> Any:
        results: list[Any] = []
        failures: list[ParallelMemberFailure] = []
        for (key, operation), task in zip(self.members, tasks, strict=True):
            nested = operation if isinstance(operation, ParallelCall) else None
            if task.cancelled():
                cancelled = asyncio.CancelledError(f"parallel member {key!r} was cancelled")
                failures.append(ParallelMemberFailure((key,), cancelled))
            elif (error := task.exception()) is not None:
                if nested is not None and isinstance(error, ParallelFailure):
                    # A nested group's leaves take their place in this group's lists.
                    failures.extend(
                        ParallelMemberFailure((key, *f.path), f.error) for f in error.failures
                    )
                    self.completions.extend(_within(key, error.completions))
                else:
                    failures.append(ParallelMemberFailure((key,), error))
            else:
                results.append(task.result())
                if nested is not None:
                    self.completions.extend(_within(key, nested.completions))
                else:
                    self.completions.append(ParallelCompletion((key,), task.result()))
        if failures:
            raise ParallelFailure(failures, self.completions)
        if self._keyed:
            return {key: value for (key, _), value in zip(self.members, results, strict=True)}
        return results


def _within(key: Key, completions: Iterable[ParallelCompletion]) -> list[ParallelCompletion]:
    return [ParallelCompletion((key, *c.path), c.result) for c in completions]


def parallel(
    operations: Iterable[Awaitable[Any]] | Mapping[str, Awaitable[Any]] | None = None,
    /,
    *,
    session: SessionOptions | None = None,
    **named: Awaitable[Any],
) -> ParallelCall:
    """Run ``operations`` together and wait for all of them: ``await
    workflow.parallel([a, b])`` returns ``[result_a, result_b]`` (input order),
    ``await workflow.parallel(x=a, y=b)`` (or a mapping) ``{"x": ..., "y": ...}``.

    Members are the calls themselves, not awaited: ``workflow.execute_activity(...)``,
    ``workflow.execute_child_workflow(...)``, ``workflow.sleep(...)``, another
    ``workflow.parallel(...)`` (a nested group), any coroutine. They start in input
    order (so their commands are emitted in that order), after a ``parallel`` marker
    that records the group's keys (and its enclosing group) in history.

    The group is a join: when a member fails, the others still run to their end (none is
    cancelled), then :class:`ParallelFailure` is raised with the first failure in input
    order and every successful leaf as :class:`ParallelCompletion`. Cancelling the
    awaiting code cancels the members still running. An invalid group (empty, a
    duplicate key or member, a non-string key, something not awaitable) raises
    :class:`ParallelGroupError` here, before any command, with a stable ``reason``.

    ``session`` (a :class:`~durable_rpc.sessions.SessionOptions`) routes every activity
    leaf of the group to that worker session, nested groups' leaves included, as if each
    ``execute_activity`` had been given it; a leaf with its own ``session=``, or inside a
    nested group with its own, keeps that. (So ``session`` is not a member key.)
    """
    if session is not None and not isinstance(session, SessionOptions):
        raise TypeError(f"session must be a SessionOptions, got {session!r}")
    members, keyed = _members.collect("parallel()", operations, named)
    return ParallelCall(members, keyed, session)
