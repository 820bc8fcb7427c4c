"""``@activity.defn``: marks a function as an activity and records how to call it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from durable_rpc.converter import arg_and_result_hints

_F = TypeVar("_F", bound=Callable[..., Any])

_ATTR = "__durable_activity_definition__"


@dataclass(frozen=True)
class ActivityDefinition:
    """A registered activity: its name, the function and the hints used to type values."""

    name: str
    fn: Callable[..., Any]
    is_async: bool
    arg_hints: tuple[Any, ...]
    result_hint: Any


def _build(fn: Callable[..., Any], name: str | None) -> ActivityDefinition:
    args, result = arg_and_result_hints(fn, skip_self=False)
    is_async = inspect.iscoroutinefunction(inspect.unwrap(fn)) or inspect.iscoroutinefunction(fn)
    return ActivityDefinition(name or fn.__name__, fn, is_async, args, result)


def _define(fn: _F, name: str | None) -> _F:
    setattr(fn, _ATTR, _build(fn, name))
    return fn


@overload
def defn(fn: _F, /) -> _F: ...
@overload
def defn(*, name: str | None = None) -> Callable[[_F], _F]: ...
def defn(fn: _F | None = None, /, *, name: str | None = None) -> _F | Callable[[_F], _F]:
    """Mark an async or sync function as an activity (``@defn`` or ``@defn(name=...)``).

    The function is returned unchanged, so it stays directly callable in tests; sync
    functions run in the worker's thread pool so they never block its event loop.
    """
    if fn is not None:
        return _define(fn, name)
    return functools.partial(_define, name=name)


def definition_of(fn: object) -> ActivityDefinition | None:
    """The definition recorded by ``@defn``, or None for an undecorated object."""
    definition = getattr(fn, _ATTR, None)
    return definition if isinstance(definition, ActivityDefinition) else None


def must_define(fn: Callable[..., Any]) -> ActivityDefinition:
    """The definition of ``fn``, deriving one for an undecorated function."""
    return definition_of(fn) or _build(fn, None)
