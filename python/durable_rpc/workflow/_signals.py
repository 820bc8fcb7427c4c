"""Signals: delivered to their handler as a task of their own, or buffered in arrival
order until a handler is registered.

A long run receives thousands of signals and a cold replay delivers them all, so the
per-signal work is kept small: a handler's argument hints are read once, when it is
registered, and a plain (sync) handler runs as a loop callback instead of a Task,
queued exactly where the Task's first step would have been (``Task.__init__`` does
``call_soon(step)``); consecutive ones share one callback, which runs them in order
(nothing else was queued between them), so every interleaving -- and every replayed
command -- is the same."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from durable_rpc import converter
from durable_rpc.workflow._instance import InstanceState, QueuedSignal
from durable_rpc.workflow._signal_handler import SignalHandler

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
        if not handler.is_async:
            batch = self._sync_signals
            if batch is not None and self.loop.is_last_ready(batch[0]):
                batch[1].append((name, handler, data))
                return
            items = [(name, handler, data)]
            self._sync_signals = (self.loop.call_soon(self._run_sync_handlers, items), items)
            return

        async def run_handler() -> None:
            await handler.fn(*converter.decode_args(data, handler.arg_hints))

        task = self.loop.create_task(run_handler(), name=f"signal:{name}")
        task.add_done_callback(self._on_handler_done)

    def _run_sync_handlers(self, items: list[QueuedSignal]) -> None:
        for name, handler, data in items:
            self._run_sync_handler(name, handler, data)

    def _run_sync_handler(self, name: str, handler: SignalHandler, data: bytes) -> None:
        try:
            result = handler.fn(*converter.decode_args(data, handler.arg_hints))
        except asyncio.CancelledError:
            return  # as a cancelled handler Task: not a failure
        except Exception as exc:
            # A failing signal handler fails the run, like a failing main method.
            self._handler_error = self._handler_error or exc
            return
        if result is not None and asyncio.iscoroutine(result):
            # A plain function returning an awaitable: await it in a task of its own.
            task = self.loop.create_task(result, name=f"signal:{name}")
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
        self._handlers[name] = SignalHandler.of(handler)
        if self._main is not None:
            self._drain_signals(name)
