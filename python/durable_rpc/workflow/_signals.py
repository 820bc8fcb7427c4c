"""Signals: delivered to their handler as a task of their own, or buffered in arrival
order until a handler is registered."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from durable_rpc import converter
from durable_rpc.converter import arg_and_result_hints
from durable_rpc.workflow._instance import InstanceState

log = logging.getLogger("durable_rpc.workflow")


class SignalsMixin(InstanceState):
    """Signal delivery, buffering and handler registration."""

    def _signal(self, name: str, data: bytes) -> None:
        if name not in self._handlers:
            # Not an error: the handler may be registered later (set_signal_handler), or
            # the sender is ahead of this code. Keep it, in arrival order.
            if not self.is_replaying:
                log.warning("signal %r has no handler yet; buffered", name)
            self._buffered_signals.setdefault(name, []).append(data)
            return
        self._deliver(name, data)

    def _deliver(self, name: str, data: bytes) -> None:
        handler = self._handlers[name]

        async def run_handler() -> None:
            hints, _ = _handler_hints(handler)
            result = handler(*converter.decode_args(data, hints))
            if asyncio.iscoroutine(result):
                await result

        task = self.loop.create_task(run_handler(), name=f"signal:{name}")
        task.add_done_callback(self._on_handler_done)

    def _on_handler_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        # A failing signal handler fails the run, like a failing main method.
        self._handler_error = self._handler_error or task.exception()

    def _drain_signals(self, name: str) -> None:
        for data in self._buffered_signals.pop(name, []):
            self._deliver(name, data)

    def set_signal_handler(self, name: str, handler: Callable[..., Any] | None) -> None:
        if handler is None:
            self._handlers.pop(name, None)
            return
        self._handlers[name] = handler
        if self._main is not None:
            self._drain_signals(name)


def _handler_hints(handler: Callable[..., Any]) -> tuple[tuple[Any, ...], Any]:
    # A bound method's function still lists ``self``; a plain function does not.
    func = getattr(handler, "__func__", None)
    if func is not None:
        return arg_and_result_hints(func)
    return arg_and_result_hints(handler, skip_self=False)
