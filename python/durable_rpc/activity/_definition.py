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
    #: The named downstream whose rate limit its attempts take a token from (None: the
    #: rate limit of its activity type, if any). Copied into the ActivityOptions of
    #: every call scheduled by function reference.
    rate_limit_key: str | None = None


def _build(
    fn: Callable[..., Any], name: str | None, rate_limit_key: str | None = None
) -> ActivityDefinition:
    args, result = arg_and_result_hints(fn, skip_self=False)
    is_async = inspect.iscoroutinefunction(inspect.unwrap(fn)) or inspect.iscoroutinefunction(fn)
    return ActivityDefinition(name or fn.__name__, fn, is_async, args, result, rate_limit_key)


def check_rate_limit_key(key: str | None) -> str | None:
    """A rate_limit_key as given (None or a non-empty str of at most 200 characters)."""
    if key is not None and (not isinstance(key, str) or not 0 < len(key) <= 200):
        raise ValueError(f"rate_limit_key must be a non-empty str of at most 200 chars: {key!r}")
    return key


def _define(fn: _F, name: str | None, rate_limit_key: str | None = None) -> _F:
    setattr(fn, _ATTR, _build(fn, name, rate_limit_key))
    return fn


@overload
def defn(fn: _F, /) -> _F: ...
@overload
def defn(*, name: str | None = None, rate_limit_key: str | None = None) -> Callable[[_F], _F]: ...
def defn(
    fn: _F | None = None, /, *, name: str | None = None, rate_limit_key: str | None = None
) -> _F | Callable[[_F], _F]:
    """Mark an async or sync function as an activity (``@defn`` or ``@defn(name=...)``).

    The function is returned unchanged, so it stays directly callable in tests; sync
    functions run in the worker's thread pool so they never block its event loop.

    ``rate_limit_key`` names the downstream its attempts are rate limited by (for
    example ``"openai"``; AdminService.SetRateLimit with scope KEY, ``durable-rpc
    task-queue rate-limit set``): a workflow that schedules it by function reference
    sends the key with every call (``execute_activity(..., rate_limit_key=...)``
    overrides it). Without a key, the rate limit of the activity type applies.
    """
    if fn is not None:
        return _define(fn, name)
    return functools.partial(
        _define, name=name, rate_limit_key=check_rate_limit_key(rate_limit_key)
    )


def definition_of(fn: object) -> ActivityDefinition | None:
    """The definition recorded by ``@defn``, or None for an undecorated object."""
    definition = getattr(fn, _ATTR, None)
    return definition if isinstance(definition, ActivityDefinition) else None


def must_define(fn: Callable[..., Any]) -> ActivityDefinition:
    """The definition of ``fn``, deriving one for an undecorated function."""
    return definition_of(fn) or _build(fn, None)
