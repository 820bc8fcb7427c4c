"""A registered signal handler, with what delivering a signal to it needs worked out
once at registration (a cold replay delivers thousands of signals)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from durable_rpc.converter import arg_and_result_hints


@dataclass(frozen=True, slots=True)
class SignalHandler:
    """A registered handler with what delivery needs, worked out once."""

    fn: Callable[..., Any]
    arg_hints: tuple[Any, ...]
    is_async: bool

    @classmethod
    def of(cls, fn: Callable[..., Any], arg_hints: tuple[Any, ...] | None = None) -> SignalHandler:
        if arg_hints is None:
            arg_hints, _ = _handler_hints(fn)
        return cls(fn, arg_hints, inspect.iscoroutinefunction(fn))


def _handler_hints(handler: Callable[..., Any]) -> tuple[tuple[Any, ...], Any]:
    # A bound method's function still lists ``self``; a plain function does not.
    func = getattr(handler, "__func__", None)
    if func is not None:
        return arg_and_result_hints(func)
    return arg_and_result_hints(handler, skip_self=False)
