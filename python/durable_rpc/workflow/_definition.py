"""``@workflow.defn`` / ``@workflow.run`` / ``@workflow.signal`` / ``@workflow.query`` /
``@workflow.update`` and the definitions they produce."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, overload

from durable_rpc._registration import DuplicateRegistrationError, RegistrationKind, source_of
from durable_rpc.converter import arg_and_result_hints
from durable_rpc.workflow._fingerprint import ALGORITHM, fingerprint, legacy_fingerprints

_C = TypeVar("_C", bound=type)
_F = TypeVar("_F", bound=Callable[..., Any])

_DEFN_ATTR = "__durable_workflow_definition__"
_RUN_ATTR = "__durable_workflow_run__"
_SIGNAL_ATTR = "__durable_workflow_signal__"
_QUERY_ATTR = "__durable_workflow_query__"
_UPDATE_ATTR = "__durable_workflow_update__"
_VALIDATOR_ATTR = "__durable_workflow_update_validator__"
_V = TypeVar("_V", bound=Callable[..., Any])


@dataclass(frozen=True)
class SignalDefinition:
    name: str
    method: Callable[..., Any]
    arg_hints: tuple[Any, ...]


@dataclass(frozen=True)
class QueryDefinition:
    name: str
    method: Callable[..., Any]
    arg_hints: tuple[Any, ...]
    result_hint: Any


@dataclass(frozen=True)
class UpdateDefinition:
    name: str
    method: Callable[..., Any]
    #: Sync method with the same arguments; raising rejects the update (None: accept all).
    validator: Callable[..., Any] | None
    arg_hints: tuple[Any, ...]
    result_hint: Any


class UpdateMethod(Protocol):
    """What ``@workflow.update`` returns: the handler, plus ``.validator`` to register
    its validator (``@<update>.validator``)."""

    __name__: str
    __qualname__: str

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def validator(self, fn: _V, /) -> _V: ...


@dataclass(frozen=True)
class WorkflowDefinition:
    """A workflow class as registered: ``(name, version)`` and its code fingerprint."""

    name: str
    version: str
    fingerprint: str
    cls: type
    run: Callable[..., Any]
    arg_hints: tuple[Any, ...]
    result_hint: Any
    signals: Mapping[str, SignalDefinition]
    queries: Mapping[str, QueryDefinition] = field(default_factory=dict)
    updates: Mapping[str, UpdateDefinition] = field(default_factory=dict)
    #: The signal names a run of it reads: its handlers' and ``defn(signals=...)``; the
    #: server refuses any other (SIGNAL_NOT_DECLARED). None: ``dynamic_signals=True``.
    declared_signals: frozenset[str] | None = None
    #: The algorithm that made ``fingerprint``, and the fingerprints of the same code
    #: under earlier algorithms, by name (``durable_rpc.fingerprint_algorithms``).
    fingerprint_algorithm: str = ALGORITHM
    legacy_fingerprints: Mapping[str, str] = field(default_factory=dict)


def _build(
    cls: _C,
    name: str | None,
    version: str,
    extra_signals: tuple[str, ...] = (),
    dynamic_signals: bool = False,
) -> _C:
    runs = [m for m in vars(cls).values() if getattr(m, _RUN_ATTR, False)]
    if len(runs) != 1:
        raise TypeError(f"{cls.__qualname__} needs exactly one @workflow.run method")
    run = runs[0]
    if not inspect.iscoroutinefunction(run):
        raise TypeError(f"{cls.__qualname__}.{run.__name__}: @workflow.run must be async def")
    signals: dict[str, SignalDefinition] = {}
    for attr in dir(cls):
        method = getattr(cls, attr, None)
        signal_name = getattr(method, _SIGNAL_ATTR, None)
        if method is not None and isinstance(signal_name, str):
            if signal_name in signals:
                raise _duplicate("signal", signal_name, name or cls.__name__, signals, method)
            hints, _ = arg_and_result_hints(method)
            signals[signal_name] = SignalDefinition(signal_name, method, hints)
    queries: dict[str, QueryDefinition] = {}
    for attr in dir(cls):
        method = getattr(cls, attr, None)
        query_name = getattr(method, _QUERY_ATTR, None)
        if method is not None and isinstance(query_name, str):
            if query_name in queries:
                raise _duplicate("query", query_name, name or cls.__name__, queries, method)
            if inspect.iscoroutinefunction(method):
                raise TypeError(
                    f"{cls.__qualname__}.{attr}: @workflow.query must be a plain (sync) method"
                )
            hints, result = arg_and_result_hints(method)
            queries[query_name] = QueryDefinition(query_name, method, hints, result)
    updates: dict[str, UpdateDefinition] = {}
    for attr in dir(cls):
        method = getattr(cls, attr, None)
        update_name = getattr(method, _UPDATE_ATTR, None)
        if method is not None and isinstance(update_name, str):
            if update_name in updates:
                raise _duplicate("update", update_name, name or cls.__name__, updates, method)
            if update_name in signals:
                raise TypeError(f"{cls.__qualname__}: {update_name!r} is a signal and an update")
            hints, result = arg_and_result_hints(method)
            updates[update_name] = UpdateDefinition(
                update_name, method, getattr(method, _VALIDATOR_ATTR, None), hints, result
            )
    arg_hints, result_hint = arg_and_result_hints(run)
    definition = WorkflowDefinition(
        name=name or cls.__name__,
        version=version,
        fingerprint=fingerprint(cls),
        cls=cls,
        run=run,
        arg_hints=arg_hints,
        result_hint=result_hint,
        signals=signals,
        queries=queries,
        updates=updates,
        declared_signals=None if dynamic_signals else frozenset((*signals, *extra_signals)),
        legacy_fingerprints=legacy_fingerprints(cls),
    )
    setattr(cls, _DEFN_ATTR, definition)
    return cls


def _duplicate(
    kind: RegistrationKind,
    name: str,
    workflow: str,
    handlers: Mapping[str, SignalDefinition | QueryDefinition | UpdateDefinition],
    again: Callable[..., Any],
) -> DuplicateRegistrationError:
    # Handler names are scoped to their workflow type: two types may reuse one.
    return DuplicateRegistrationError(
        kind, name, workflow, source_of(handlers[name].method), source_of(again)
    )


@overload
def defn(cls: _C, /) -> _C: ...
@overload
def defn(
    *,
    name: str | None = None,
    version: str | int = "1",
    signals: Iterable[str] = (),
    dynamic_signals: bool = False,
) -> Callable[[_C], _C]: ...
def defn(
    cls: _C | None = None,
    /,
    *,
    name: str | None = None,
    version: str | int = "1",
    signals: Iterable[str] = (),
    dynamic_signals: bool = False,
) -> _C | Callable[[_C], _C]:
    """Mark a class as a workflow definition ``(name, version)``; name defaults to the
    class name. The class needs one ``@workflow.run`` async method and a no-argument
    constructor; each run gets a fresh instance. ``version`` is a string; an int (the
    natural spelling, ``version=2``) stands for its decimal string, so ``2`` and ``"2"``
    are the same definition.

    The signals a run accepts are declared here: the names of its ``@workflow.signal``
    handlers, plus ``signals`` (names read through ``workflow.set_signal_handler``). The
    server refuses any other with SIGNAL_NOT_DECLARED instead of buffering it unread.
    ``dynamic_signals=True`` opts out: any name is accepted (handlers chosen at run time).
    """
    version = _version_text(version)
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"workflow name must be a non-empty str, not {name!r}")
    declared = _signal_names(signals)
    if dynamic_signals and declared:
        raise TypeError("dynamic_signals=True accepts every signal: drop signals=")
    if cls is not None:
        return _build(cls, name, version, declared, dynamic_signals)
    return functools.partial(
        _build,
        name=name,
        version=version,
        extra_signals=declared,
        dynamic_signals=dynamic_signals,
    )


def _signal_names(signals: Iterable[str]) -> tuple[str, ...]:
    if isinstance(signals, str):  # one name, not its characters
        raise TypeError(f"signals must be a list of names, not the str {signals!r}")
    names = tuple(signals)
    for signal_name in names:
        if not isinstance(signal_name, str) or not signal_name:
            raise TypeError(f"a declared signal must be a non-empty str, not {signal_name!r}")
    return names


def _version_text(version: object) -> str:
    """The wire form of a version, refused here rather than deep inside a later call."""
    # bool is an int subclass; True is no version anyone meant.
    if isinstance(version, int) and not isinstance(version, bool):
        return str(version)
    if not isinstance(version, str):
        raise TypeError(
            f"workflow version must be a str or an int, not {type(version).__name__} ({version!r})"
        )
    if not version:
        raise ValueError("workflow version must not be empty")
    return version


def run(fn: _F) -> _F:
    """Mark the workflow's async main method; its arguments are the workflow's input."""
    setattr(fn, _RUN_ATTR, True)
    return fn


@overload
def signal(fn: _F, /) -> _F: ...
@overload
def signal(*, name: str | None = None) -> Callable[[_F], _F]: ...
def signal(fn: _F | None = None, /, *, name: str | None = None) -> _F | Callable[[_F], _F]:
    """Mark a method (sync or async) as the handler of a signal (default: method name)."""

    def mark(f: _F) -> _F:
        setattr(f, _SIGNAL_ATTR, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


@overload
def query(fn: _F, /) -> _F: ...
@overload
def query(*, name: str | None = None) -> Callable[[_F], _F]: ...
def query(fn: _F | None = None, /, *, name: str | None = None) -> _F | Callable[[_F], _F]:
    """Mark a sync method as the handler of a read-only query (default: method name).

    A worker answers a query by replaying the run and calling the handler on the
    rebuilt instance; nothing is recorded. The handler must only read state: one that
    awaits, schedules activities or starts timers fails the query (never the run).
    """

    def mark(f: _F) -> _F:
        if inspect.iscoroutinefunction(f):
            raise TypeError(f"{f.__qualname__}: @workflow.query must be a plain (sync) method")
        setattr(f, _QUERY_ATTR, name or f.__name__)
        return f

    return mark(fn) if fn is not None else mark


@overload
def update(fn: Callable[..., Any], /) -> UpdateMethod: ...
@overload
def update(*, name: str | None = None) -> Callable[[Callable[..., Any]], UpdateMethod]: ...
def update(
    fn: Callable[..., Any] | None = None, /, *, name: str | None = None
) -> UpdateMethod | Callable[[Callable[..., Any]], UpdateMethod]:
    """Mark a method (sync or async) as the handler of an update (default: method name).

    An update is a request that changes the run and returns a result to its caller.
    ``@<update>.validator`` registers a sync method taking the same arguments that runs
    first and rejects the update by raising: a rejected update leaves nothing in
    history. An accepted one is recorded (UpdateAccepted), its handler runs on the
    workflow's deterministic loop (it may await activities and timers) and its result or
    failure is recorded (UpdateCompleted).
    """

    def mark(f: Callable[..., Any]) -> UpdateMethod:
        setattr(f, _UPDATE_ATTR, name or f.__name__)

        def validator(v: _V, /) -> _V:
            if inspect.iscoroutinefunction(v):
                raise TypeError(f"{v.__qualname__}: an update validator must be a sync method")
            setattr(f, _VALIDATOR_ATTR, v)
            return v

        setattr(f, "validator", validator)  # noqa: B010
        return f  # type: ignore[return-value]

    return mark(fn) if fn is not None else mark


def update_name(ref: Callable[..., Any]) -> str | None:
    """The update name ``@workflow.update`` gave ``ref`` (None when it is not one)."""
    value = getattr(ref, _UPDATE_ATTR, None)
    return value if isinstance(value, str) else None


def definition_of(cls: type) -> WorkflowDefinition:
    """The definition ``@workflow.defn`` recorded on ``cls``."""
    definition = getattr(cls, _DEFN_ATTR, None)
    if not isinstance(definition, WorkflowDefinition) or definition.cls is not cls:
        raise TypeError(f"{getattr(cls, '__qualname__', cls)!r} is not a @workflow.defn class")
    return definition
