"""Timers and wait conditions, and running the workflow's coroutines until all are
blocked (the conditions are checked again each time the loop settles)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from durable_rpc.v1 import workflow_task_pb2
from durable_rpc.workflow._errors import WorkflowTaskError
from durable_rpc.workflow._instance import InstanceState


class TimersMixin(InstanceState):
    """Timers, wait_condition and the run-until-blocked loop."""

    def _run(self) -> None:
        while True:
            self.loop.run_until_blocked(self.deadline)
            if not self._check_conditions():
                return

    def _fire_timer(self, seq: int) -> None:
        future = self._timers.pop(seq, None)
        if future is None:
            if seq in self._abandoned:
                self._abandoned.discard(seq)
                return
            raise WorkflowTaskError(f"fired timer for unknown seq {seq}")
        if not future.done():
            future.set_result(None)

    def start_timer(self, seconds_nanos: tuple[int, int]) -> tuple[int, asyncio.Future[None]]:
        seq = self._take_seq()
        future: asyncio.Future[None] = self.loop.create_future()
        self._timers[seq] = future
        command = workflow_task_pb2.Command(seq=seq)
        command.start_timer.duration.seconds, command.start_timer.duration.nanos = seconds_nanos
        self._emit(command)
        return seq, future

    def cancel_timer(self, seq: int) -> None:
        """Cancel a timer that has not fired. The command carries the timer's own seq
        (it is the same call), so cancelling never shifts later seqs."""
        if self._timers.pop(seq, None) is None:
            return
        self._abandoned.add(seq)
        self._emit(
            workflow_task_pb2.Command(
                seq=seq, cancel_timer=workflow_task_pb2.CancelTimer(timer_seq=seq)
            )
        )

    def wait_condition(self, predicate: Callable[[], bool]) -> asyncio.Future[None]:
        self._refuse_in_query()
        future: asyncio.Future[None] = self.loop.create_future()
        self._conditions.append((predicate, future))
        return future

    def _check_conditions(self) -> bool:
        """Resolve the conditions that became true; True if any did (so run again)."""
        resolved = False
        for entry in list(self._conditions):
            predicate, future = entry
            if future.done():
                self._conditions.remove(entry)
                continue
            try:
                ready = predicate()
            except Exception as exc:
                future.set_exception(exc)
                ready = True
            else:
                if ready:
                    future.set_result(None)
            if ready:
                self._conditions.remove(entry)
                resolved = True
        return resolved
