"""Resolve what callers pass (``Wf.run``, ``Wf.signal_method`` or a plain name) to names."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

# Set by @workflow.defn on the class (and its run method) and by @workflow.signal.
DEFINITION_ATTR = "__durable_workflow_definition__"
SIGNAL_ATTR = "__durable_workflow_signal__"
QUERY_ATTR = "__durable_workflow_query__"
UPDATE_ATTR = "__durable_workflow_update__"


def workflow_ref(target: Callable[..., Any] | str) -> tuple[str, str, Any]:
    """(workflow type, version, result type hint) for a run method or a type name."""
    if isinstance(target, str):
        return target, "1", Any
    defn = getattr(target, DEFINITION_ATTR, None)
    if defn is None:
        owner = _owner_class(target)
        defn = getattr(owner, DEFINITION_ATTR, None) if owner is not None else None
    if defn is None:
        raise TypeError(f"{target!r} is not a @workflow.run method of a @workflow.defn class")
    return defn.name, defn.version, _return_hint(target)


def signal_name(target: Callable[..., Any] | str) -> str:
    if isinstance(target, str):
        return target
    name = getattr(target, SIGNAL_ATTR, None)
    if not isinstance(name, str):
        raise TypeError(f"{target!r} is not a @workflow.signal method")
    return name


def query_ref(target: Callable[..., Any] | str) -> tuple[str, Any]:
    """(query name, result type hint) for a @workflow.query method or a plain name."""
    if isinstance(target, str):
        return target, Any
    name = getattr(target, QUERY_ATTR, None)
    if not isinstance(name, str):
        raise TypeError(f"{target!r} is not a @workflow.query method")
    return name, _return_hint(target)


def update_ref(target: Callable[..., Any] | str) -> tuple[str, Any]:
    """(update name, result type hint) for a @workflow.update method or a plain name."""
    if isinstance(target, str):
        return target, Any
    name = getattr(target, UPDATE_ATTR, None)
    if not isinstance(name, str):
        raise TypeError(f"{target!r} is not a @workflow.update method")
    return name, _return_hint(target)


def _owner_class(fn: Callable[..., Any]) -> type | None:
    qualname = getattr(fn, "__qualname__", "")
    module = inspect.getmodule(fn)
    if module is None or "." not in qualname:
        return None
    owner: Any = module
    for part in qualname.split(".")[:-1]:
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    return owner if isinstance(owner, type) else None


def _return_hint(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return", Any)
    except (NameError, TypeError):
        return Any
