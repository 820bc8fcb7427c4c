"""Cheap guards against the most common nondeterminism mistakes in workflow code.

Not a sandbox in the strong sense: a handful of stdlib functions (the clock, the global
random generator, uuid1/uuid4, ``time.sleep``, ``open``, sockets, ``datetime.now``...)
are replaced by wrappers that check one context variable. The variable is set only while
a workflow activation (or a query) runs on the current thread (:func:`restricted`), so
activities, the worker's event loop and every other thread see the original behaviour at
the price of one ``ContextVar.get()`` per call.

Inside an activation a *direct* call from workflow code raises
:class:`RestrictedOperationError` naming the deterministic replacement, and records a
violation on the workflow loop so the workflow *task* fails even if the code swallows
the exception (the run stays open; fix the code and redeploy). Calls made by the
standard library or by durable_rpc itself on the workflow's behalf (logging reading
the clock, tempfile drawing random names...) are let through: only the caller's own
frame is inspected. Sockets and ``time.sleep`` are refused whoever calls them.

Names bound before the guards were installed (``from time import time`` executed at
import time before the first workflow ran) keep the original function and are not
caught; ``import time`` + ``time.time()`` is.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import datetime as _dt
import functools
import os
import pathlib
import random as _random
import socket
import sys
import sysconfig
import threading
import time as _time
import uuid as _uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from durable_rpc.workflow._errors import RestrictedOperationError, WorkflowTaskError
from durable_rpc.workflow._loop import WorkflowLoop

_ACTIVE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "durable_rpc_workflow_restricted", default=False
)
_GUARDED = "__durable_rpc_guarded__"
_install_lock = threading.Lock()
_installed = False


def _trusted_prefixes() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    prefixes = {paths["stdlib"], paths["platstdlib"], package}
    return (*(os.path.join(p, "") for p in prefixes if p), "<frozen ")


_TRUSTED = _trusted_prefixes()


@contextmanager
def restricted() -> Iterator[None]:
    """Refuse the guarded operations on this thread (and the tasks created here)."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


@contextmanager
def unrestricted() -> Iterator[None]:
    """Lift the guards for a block run on the workflow's behalf whose result is
    recorded (the function given to ``workflow.side_effect``)."""
    token = _ACTIVE.set(False)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def is_restricted() -> bool:
    return _ACTIVE.get()


def _refuse(what: str, instead: str, *, any_caller: bool) -> None:
    """Raise unless the caller of the guarded function is trusted library code.

    Frame 0 is this function, 1 the wrapper, 2 the code that called the wrapper.
    """
    if not any_caller and sys._getframe(2).f_code.co_filename.startswith(_TRUSTED):
        return
    error = RestrictedOperationError(
        f"{what} is not allowed in workflow code: it is not deterministic (a replay would "
        f"see a different value or effect). Use {instead} instead."
    )
    loop = asyncio._get_running_loop()
    if isinstance(loop, WorkflowLoop) and loop.violation is None:
        loop.violation = WorkflowTaskError(str(error))
    raise error


def _guard(owner: Any, attr: str, what: str, instead: str, *, any_caller: bool = False) -> None:
    original = getattr(owner, attr, None)
    if original is None or getattr(original, _GUARDED, False):
        return
    active = _ACTIVE

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if active.get():
            _refuse(what, instead, any_caller=any_caller)
        return original(*args, **kwargs)

    setattr(guarded, _GUARDED, True)
    setattr(owner, attr, guarded)


def _guard_builtin_classmethod(cls: type, attr: str, what: str, instead: str) -> None:
    """``datetime.now`` & co. live on a C type whose attributes cannot be set; the
    type's real dict is patched through gc and the type cache invalidated. Skipped
    (silently) on interpreters where that does not work."""
    try:
        import ctypes
        import gc

        original = cls.__dict__[attr]
        if getattr(original, _GUARDED, False) or getattr(
            getattr(original, "__func__", None), _GUARDED, False
        ):
            return
        active = _ACTIVE

        def guarded(klass: type, *args: Any, **kwargs: Any) -> Any:
            if active.get():
                _refuse(what, instead, any_caller=False)
            return original.__get__(None, klass)(*args, **kwargs)

        setattr(guarded, _GUARDED, True)
        guarded.__name__ = attr
        guarded.__doc__ = original.__doc__
        referents = [r for r in gc.get_referents(cls.__dict__) if isinstance(r, dict)]
        if len(referents) != 1:
            return
        referents[0][attr] = classmethod(guarded)
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))
    except Exception:  # pragma: no cover - depends on the interpreter
        return


_CLOCK = "workflow.now() (or workflow.sleep() to wait)"
_RANDOM = "workflow.random()"
_UUID = "workflow.uuid4()"
_IO = "an activity"


def install() -> None:
    """Install the guards once per process (idempotent, thread-safe)."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter"):
            _guard(_time, name, f"time.{name}()", _CLOCK)
        _guard(_time, "sleep", "time.sleep()", "await workflow.sleep()", any_caller=True)
        for name in (
            "random",
            "randint",
            "randrange",
            "choice",
            "choices",
            "shuffle",
            "sample",
            "uniform",
            "getrandbits",
            "gauss",
            "randbytes",
        ):
            _guard(_random, name, f"random.{name}()", _RANDOM)
        _guard(_uuid, "uuid1", "uuid.uuid1()", _UUID)
        _guard(_uuid, "uuid4", "uuid.uuid4()", _UUID)
        _guard(os, "urandom", "os.urandom()", _RANDOM)
        _guard(builtins, "open", "open()", _IO)
        for name in ("open", "read_text", "read_bytes", "write_text", "write_bytes"):
            _guard(pathlib.Path, name, f"Path.{name}()", _IO)
        for name in ("__init__",):
            _guard(socket.socket, name, "creating a socket", _IO, any_caller=True)
        _guard(socket, "create_connection", "socket.create_connection()", _IO, any_caller=True)
        _guard(socket, "getaddrinfo", "socket.getaddrinfo()", _IO, any_caller=True)
        for name in ("now", "utcnow", "today"):
            _guard_builtin_classmethod(_dt.datetime, name, f"datetime.{name}()", _CLOCK)
        _guard_builtin_classmethod(_dt.date, "today", "date.today()", _CLOCK)
        _installed = True


__all__: list[str] = ["install", "is_restricted", "restricted"]
