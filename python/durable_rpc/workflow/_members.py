"""Members of parallel groups and selections: validating a group before it emits any
command, and running each member as a task that knows which group it belongs to.

A member's task carries its chain of enclosing members in a context variable, so every
seq its code takes (``InstanceState._take_seq``) is attributed to each enclosing member.
When the member ends, its history position is that of the latest job of the current
activation that resolved one of its seqs: a selection ranks its members by history
order from that, not by how many loop steps each member's code took to finish.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_rpc.sessions import SessionOptions
    from durable_rpc.workflow._instance import InstanceState

#: A member's identity in its group: its index (a list) or its key (a mapping).
Key = int | str
#: Where a member sits: its key in each enclosing group, outermost first.
Path = tuple[Key, ...]

#: ParallelGroupError reasons (stable; docs/engine.md "Parallel groups and selections").
EMPTY_GROUP = "EMPTY_GROUP"
DUPLICATE_KEY = "DUPLICATE_KEY"
INVALID_KEY = "INVALID_KEY"
NOT_AWAITABLE = "NOT_AWAITABLE"
DUPLICATE_MEMBER = "DUPLICATE_MEMBER"
MIXED_KEYS = "MIXED_KEYS"
UNKNOWN_KEY = "UNKNOWN_KEY"


class ParallelGroupError(ValueError):
    """A parallel group or selection is invalid; raised before it emits any command.

    ``reason`` is stable: EMPTY_GROUP, DUPLICATE_KEY, INVALID_KEY, NOT_AWAITABLE,
    DUPLICATE_MEMBER, MIXED_KEYS (a list and keyword members together) or UNKNOWN_KEY
    (``Selection.handle`` of a key the selection does not have)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(eq=False)
class Member:
    """One running member: the seqs its code took and where in history it ended."""

    group_seq: int
    key: Key
    seqs: set[int] = field(default_factory=set)
    #: (activation number, job index) of the job that ended it; None while running.
    ended_at: tuple[int, int] | None = None
    #: Set by DurableOperationHandle.cancel(): a member cancelled so never wins.
    cancel_requested: bool = False
    #: The worker session of its group (``parallel(..., session=...)``): the default of
    #: every activity its code schedules; None: the enclosing group's, if any.
    session: SessionOptions | None = None


#: The members whose task is running now, outermost first (empty outside any group).
MEMBERS: contextvars.ContextVar[tuple[Member, ...]] = contextvars.ContextVar(
    "durable_rpc_group_members", default=()
)


def collect(
    what: str, operations: Iterable[Any] | Mapping[Any, Any] | None, named: Mapping[str, Any]
) -> tuple[list[tuple[Key, Awaitable[Any]]], bool]:
    """The members of a group as ``(key, awaitable)`` in input order, and whether they
    are keyed (a mapping or keywords) rather than indexed (a list). Any error closes the
    members' coroutines (none of them ran) and raises ParallelGroupError."""
    keyed = isinstance(operations, Mapping) or operations is None
    pairs: list[tuple[Any, Any]] = []
    if isinstance(operations, Mapping):
        pairs.extend(operations.items())
    elif operations is not None:
        if isinstance(operations, str | bytes) or not isinstance(operations, Iterable):
            _fail([], NOT_AWAITABLE, f"{what} takes a list or a mapping of operations")
        pairs.extend(enumerate(operations))
    if named and not keyed:
        _fail(
            [v for _, v in pairs] + list(named.values()),
            MIXED_KEYS,
            f"{what} takes a list or keyed operations, not both",
        )
    seen = {key for key, _ in pairs}
    for key, value in named.items():
        if key in seen:
            _fail(
                [v for _, v in pairs] + list(named.values()),
                DUPLICATE_KEY,
                f"{what}: key {key!r} is given twice",
            )
        pairs.append((key, value))
    values = [v for _, v in pairs]
    if not pairs:
        _fail(values, EMPTY_GROUP, f"{what} needs at least one operation")
    ids: set[int] = set()
    for key, value in pairs:
        if keyed and (not isinstance(key, str) or not key):
            _fail(values, INVALID_KEY, f"{what}: keys must be non-empty strings, got {key!r}")
        if not inspect.isawaitable(value):
            _fail(
                values,
                NOT_AWAITABLE,
                f"{what}: member {key!r} is not awaitable ({type(value).__name__}); pass "
                "the call itself, e.g. workflow.execute_activity(...) without await",
            )
        if id(value) in ids:
            _fail(values, DUPLICATE_MEMBER, f"{what}: member {key!r} is given twice")
        ids.add(id(value))
    return [(key, value) for key, value in pairs], keyed


def _fail(values: list[Any], reason: str, message: str) -> Any:
    close(values)
    raise ParallelGroupError(reason, message)


def close(values: Iterable[Any]) -> None:
    """Close members that will never run (no "coroutine was never awaited" warning)."""
    for value in values:
        if inspect.iscoroutine(value):
            value.close()
        elif callable(unstarted := getattr(value, "close_unstarted", None)):
            unstarted()  # a nested group: its own members


def start(runtime: InstanceState, member: Member, operation: Awaitable[Any]) -> asyncio.Task[Any]:
    """Run ``operation`` as a task of the workflow loop, inside ``member``."""
    context = contextvars.copy_context()
    context.run(MEMBERS.set, (*MEMBERS.get(), member))

    async def body() -> Any:
        try:
            return await operation
        finally:
            member.ended_at = runtime.history_position(member.seqs)

    return runtime.loop.create_task(body(), context=context)


def group_session() -> SessionOptions | None:
    """The session of the innermost enclosing group that names one: an activity leaf
    scheduled without its own ``session=`` runs in it (a nested group's own wins)."""
    for member in reversed(MEMBERS.get()):
        if member.session is not None:
            return member.session
    return None


def parent() -> tuple[int, Key | None]:
    """The enclosing member's group seq and key, (0, None) at top level."""
    chain = MEMBERS.get()
    return (chain[-1].group_seq, chain[-1].key) if chain else (0, None)
