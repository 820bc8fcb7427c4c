"""A deterministic asyncio event loop for workflow code.

Workflow coroutines must produce the same commands every time they are replayed, so
they cannot run on a real event loop (whose timers, I/O and thread callbacks depend on
the outside world). This loop only has a ready queue: ``call_soon`` appends, and
:meth:`WorkflowLoop.run_until_blocked` runs callbacks in FIFO order until none is left,
i.e. until every coroutine waits on a future that only a later activation can resolve.
``time()`` is the workflow clock. Everything else a loop can do (``call_later`` behind
``asyncio.sleep``, sockets, executors, subprocesses...) raises
:class:`RestrictedOperationError` *and* is recorded, so the workflow task fails even if
the code swallows the exception.

Standard asyncio building blocks (Task, Future, gather, wait, Event, Queue, Lock,
shield) work unchanged on top of it, because they only need ``call_soon`` and
``create_future`` from their loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, TypeVar, TypeVarTuple, Unpack

from durable_rpc.workflow._errors import RestrictedOperationError, WorkflowTaskError

_T = TypeVar("_T")
_Ts = TypeVarTuple("_Ts")

# What users wrote to end up at a forbidden loop method, for a helpful message.
_FORBIDDEN_HINTS = {
    "call_later": "asyncio.sleep / call_later / wait_for with a timeout",
    "call_at": "call_at / asyncio.timeout",
    "run_in_executor": "run_in_executor / asyncio.to_thread",
}

log = logging.getLogger("durable_rpc.workflow")


class WorkflowLoop(asyncio.AbstractEventLoop):
    def __init__(self, owner: object) -> None:
        # The runtime that owns this loop; the workflow API finds it through the
        # running loop, so no global state is needed.
        self.owner = owner
        self._ready: deque[asyncio.Handle] = deque()
        self._workflow_time = 0.0
        # While True (an inline decision's live activation) the clock is unknown and any
        # read of it is remembered in `clock_read_while_unknown`.
        self.clock_unknown = False
        self.clock_read_while_unknown = False
        self._running = False
        self.violation: BaseException | None = None
        # Every task of the workflow (see abandon()); weak: finished ones just go.
        self._tasks: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()

    # --- what asyncio needs ---------------------------------------------------------

    def call_soon(
        self,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = asyncio.Handle(callback, args, self, context)
        self._ready.append(handle)
        return handle

    def create_future(self) -> asyncio.Future[Any]:
        return asyncio.Future(loop=self)

    def create_task(
        self,
        coro: Generator[Any, None, _T] | Coroutine[Any, Any, _T],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[_T]:
        task = asyncio.Task(coro, loop=self, name=name, context=context)
        self._tasks.add(task)
        return task

    def time(self) -> float:
        if self.clock_unknown:
            self.clock_read_while_unknown = True
        return self._workflow_time

    def set_time(self, seconds: float) -> None:
        self._workflow_time = seconds

    def get_debug(self) -> bool:
        return False

    def is_running(self) -> bool:
        return self._running

    def is_closed(self) -> bool:
        return False

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        message = str(context.get("message", ""))
        if "handle" in context:
            # A callback itself raised (not a task: tasks capture their exceptions).
            # That is a runtime bug, never workflow logic: fail the task.
            self.violation = self.violation or WorkflowTaskError(
                f"workflow loop callback failed: {message}: {context.get('exception')!r}"
            )
        elif "destroyed but it is pending" in message:
            # Background tasks still waiting when the run closes are simply dropped.
            return
        else:
            log.warning("workflow loop: %s", message, exc_info=context.get("exception"))

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.call_exception_handler(context)

    def abandon(self) -> None:
        """The workflow task failed and this loop is dropped with its instance. Its
        tasks' exceptions are that failure (already reported as the task's), so they
        are marked retrieved: otherwise each, once collected, logs asyncio's "Task
        exception was never retrieved" long after the fact."""
        for task in list(self._tasks):
            if task.done() and not task.cancelled():
                task.exception()

    # --- what is forbidden ----------------------------------------------------------

    def _forbid(self, what: str) -> NoReturn:
        error = RestrictedOperationError(
            f"{what} is not allowed in workflow code: it is not deterministic. "
            "Use workflow.sleep() for timers and activities for I/O."
        )
        self.violation = self.violation or WorkflowTaskError(str(error))
        raise error

    # --- driving --------------------------------------------------------------------

    @contextmanager
    def running(self) -> Iterator[None]:
        """Make this the running loop, so asyncio.create_task / get_running_loop / gather
        resolve to it (and the workflow API finds its runtime)."""
        previous = asyncio._get_running_loop()
        asyncio._set_running_loop(self)
        self._running = True
        try:
            yield
        finally:
            self._running = False
            asyncio._set_running_loop(previous)

    def run_until_blocked(self, deadline: float | None) -> None:
        """Run ready callbacks until none is left. ``deadline`` (time.monotonic) bounds
        the wall time: code that never blocks (a busy ``await asyncio.sleep(0)`` loop)
        fails the task instead of hanging the worker."""
        while self._ready:
            if deadline is not None and time.monotonic() > deadline:
                raise WorkflowTaskError(
                    "workflow code ran past the workflow task deadline without blocking "
                    "(a busy loop or blocking call in workflow code?)"
                )
            handle = self._ready.popleft()
            if not handle.cancelled():
                handle._run()
            if self.violation is not None:
                raise self.violation

    def has_ready(self) -> bool:
        return bool(self._ready)

    def is_last_ready(self, handle: asyncio.Handle) -> bool:
        """Whether ``handle`` is queued and nothing was queued after it."""
        return bool(self._ready) and self._ready[-1] is handle


def _install_forbidden_stubs() -> None:
    """Every other AbstractEventLoop method (sockets, subprocesses, signals, servers...)
    raises a clear error instead of AbstractEventLoop's bare NotImplementedError."""
    for name, member in vars(asyncio.AbstractEventLoop).items():
        if name.startswith("_") or not callable(member) or name in vars(WorkflowLoop):
            continue

        def stub(self: WorkflowLoop, *args: Any, _name: str = name, **kwargs: Any) -> NoReturn:
            self._forbid(_FORBIDDEN_HINTS.get(_name, f"loop.{_name}()"))

        stub.__name__ = name
        setattr(WorkflowLoop, name, stub)


_install_forbidden_stubs()


def new_loop(owner: object) -> WorkflowLoop:
    # AbstractEventLoop declares ~80 abstract methods; _install_forbidden_stubs
    # implements the ones this loop refuses, which mypy cannot see.
    return WorkflowLoop(owner)  # type: ignore[abstract]
