"""Registration rules: one handler per name, found before any server is contacted.

A name registered twice is ambiguous (which handler runs depends on replacement order),
so it is refused where it is configured, naming both definitions' source lines: workflow
``(name, version)`` and activity names once per Worker, query and update names once per
workflow type (two types may reuse one).
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

RegistrationKind = Literal["workflow", "activity", "signal", "query", "update"]


class DuplicateRegistrationError(ValueError):
    """The same ``kind`` of handler registered twice under ``name``.

    ``scope`` is the workflow type a query, update or signal name belongs to (``None`` for
    workflows and activities, which are scoped to the Worker); ``first`` and ``second``
    are the ``file:line`` of the two definitions. A ValueError, as the bad configuration
    it is; it never reaches the wire.
    """

    def __init__(
        self, kind: RegistrationKind, name: str, scope: str | None, first: str, second: str
    ) -> None:
        where = f" on workflow {scope!r}" if scope is not None else ""
        super().__init__(
            f"{kind} {name!r}{where} registered twice: first at {first}, again at {second}"
        )
        self.kind: RegistrationKind = kind
        self.name = name
        self.scope = scope
        self.first = first
        self.second = second


def source_of(obj: Any) -> str:
    """``file:line`` where a function or class is defined (its ``module.qualname`` when
    the source is not reachable, e.g. a class built by ``type()``)."""
    target = inspect.unwrap(obj) if callable(obj) and not isinstance(obj, type) else obj
    target = getattr(target, "__func__", target)  # a bound or class method
    code = getattr(target, "__code__", None)
    if code is not None:
        return f"{code.co_filename}:{code.co_firstlineno}"
    try:
        lines = inspect.getsourcelines(target)
        return f"{inspect.getsourcefile(target)}:{lines[1]}"
    except (OSError, TypeError):
        return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"
