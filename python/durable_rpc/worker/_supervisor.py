"""``WorkflowSupervisor``: bounded claim-and-execute cycles with backoff and a graceful stop.

Up to ``max_concurrency`` cycles run at once; each polls for one task, runs it and reports
it under its lease. While the queues are quiet only ``idle_cycles`` of them poll, the
others parked until the arrivals outpace the polls (``_cycle_gate``). On errors (server
unavailable...) a cycle backs off exponentially between the configured bounds. When the
token is cancelled, cycles stop claiming (polls in progress are abandoned), tasks already
claimed run to the end of their lease protocol, then the worker deregisters and
:meth:`WorkflowSupervisor.run` returns a :class:`SupervisorReport`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from durable_rpc.errors import DurableRpcError, StoreUnavailableError
from durable_rpc.worker._cycle_gate import CycleGate
from durable_rpc.worker._server_link import is_transient
from durable_rpc.worker._worker import TaskKind, TaskOutcome, Worker

# Longest a workflow cycle waits, before polling again, for the activities its task handed
# over eagerly to report (see Worker.eager_settled).
EAGER_HEAD_START_S = 0.005

log = logging.getLogger("durable_rpc.worker")


def _seconds(value: timedelta | float) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass(frozen=True)
class WorkflowSupervisorConfig:
    """How many claim-and-execute cycles run at once (at most ``max_concurrency``; while
    the queues are quiet, ``idle_cycles`` of them), and the error backoff bounds."""

    max_concurrency: int
    backoff_min: float = 0.025
    backoff_max: float = 5.0
    idle_cycles: int = 8

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if self.idle_cycles < 1:
            raise ValueError("idle_cycles must be at least 1")
        if self.backoff_min <= 0:
            raise ValueError("backoff min must be positive")
        if self.backoff_max < self.backoff_min:
            raise ValueError("backoff max must not be below min")

    def with_backoff(
        self, min: timedelta | float, max: timedelta | float
    ) -> WorkflowSupervisorConfig:
        """A copy backing off from ``min`` doubling up to ``max`` (timedelta or seconds)."""
        return replace(self, backoff_min=_seconds(min), backoff_max=_seconds(max))

    def backoff(self, consecutive_errors: int) -> float:
        exponent = min(consecutive_errors - 1, 32)
        return float(min(self.backoff_max, self.backoff_min * 2**exponent))

    @classmethod
    def default(cls) -> WorkflowSupervisorConfig:
        # 64: on the hello workload (bench/e2e_bench.py, SQLite) 8 cycles gave 77-96 wf/s
        # and 64 gave 118-137 at the same p50; idle, the gate keeps 8 polls.
        return cls(DEFAULT_MAX_CONCURRENCY)


#: Claim-and-execute cycles of a worker made with the defaults.
DEFAULT_MAX_CONCURRENCY = 64


class CancellationToken:
    """Cancelled once, observed by many; ``cancel()`` is safe from any thread."""

    def __init__(self) -> None:
        self._cancelled = False
        self._event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def is_cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True
        if self._event is None or self._loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._event.set()
        else:
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self) -> None:
        """Return once the token is cancelled."""
        if self._event is None:
            self._event = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        if self._cancelled:
            return
        await self._event.wait()


@dataclass
class SupervisorReport:
    """What one ``run`` did. ``claims`` = tasks received; ``completions`` and
    ``failures`` = outcomes accepted by the server; ``lease_losses`` = outcomes dropped
    because another owner took over; ``errors`` = cycles that backed off.
    ``queries`` = queries answered (or failed) by this worker: not tasks, so not in
    ``claims``/``completions``/``failures``. ``inline_workflow_tasks`` = workflow tasks
    decided inline with an activity completion (also counted as claimed and completed)."""

    claims: int = 0
    completions: int = 0
    failures: int = 0
    lease_losses: int = 0
    workflow_tasks: int = 0
    activity_tasks: int = 0
    errors: int = 0
    queries: int = 0
    inline_workflow_tasks: int = 0

    def count_inline(self) -> None:
        """A workflow task decided inline with an activity completion and recorded."""
        self.inline_workflow_tasks += 1
        self.count_eager("workflow", "completed")

    def count_eager(self, kind: TaskKind, outcome: TaskOutcome) -> None:
        """A task the server handed over with another task's completion."""
        self.claims += 1
        if kind == "workflow":
            self.workflow_tasks += 1
        else:
            self.activity_tasks += 1
        self.count(outcome)

    def count(self, outcome: TaskOutcome) -> None:
        if outcome == "completed":
            self.completions += 1
        elif outcome == "failed":
            self.failures += 1
        else:
            self.lease_losses += 1


class WorkflowSupervisor:
    def __init__(self, worker: Worker, config: WorkflowSupervisorConfig | None = None) -> None:
        self.worker = worker
        self.config = config or WorkflowSupervisorConfig.default()
        self._stopped: asyncio.Future[None] | None = None
        self._gate = CycleGate()

    async def run(self, token: CancellationToken) -> SupervisorReport:
        report = SupervisorReport()
        self.worker.outcomes = report
        await self._start(token, report)
        if token.is_cancelled:
            await self.worker.stop()
            return report

        async def stop_claiming() -> None:
            await token.wait()
            self.worker.claiming = False
            self._gate.close()

        stopper = asyncio.ensure_future(stop_claiming())
        # Done once the token is cancelled: every poll of this run waits on it too.
        self._stopped = stopper
        try:
            plan = self._plan()
            # The workflow slots its heartbeat reports (activities: the activity slots).
            self.worker.counters.workflow_slots = sum("workflow" in kinds for kinds in plan)
            always = self._always_polling(plan)
            cycles = [
                asyncio.ensure_future(self._cycle(kinds, token, report, parks=i not in always))
                for i, kinds in enumerate(plan)
            ]
            # Cycles end by themselves after the token is cancelled (draining their task).
            await asyncio.gather(*cycles)
        finally:
            stopper.cancel()
            self._stopped = None
            self.worker.claiming = False
            await self.worker.drain()
            await self.worker.stop()
        return report

    async def _start(self, token: CancellationToken, report: SupervisorReport) -> None:
        errors = 0
        while not token.is_cancelled:
            try:
                await self.worker.start()
                return
            except StoreUnavailableError:
                # Not logged here: the worker's link logs the outage once.
                errors += 1
                report.errors += 1
                await self._pause(token, self.config.backoff(errors))

    def _plan(self, n: int | None = None) -> list[list[TaskKind]]:
        """The task kinds each cycle polls. With both kinds, half the cycles poll each
        (workflow tasks are short, activities long); a single cycle alternates. A worker
        with workflows also runs one "query" cycle, on top of ``max_concurrency``:
        queries are rare, read-only and must not wait behind long activities."""
        kinds = list(self.worker.task_kinds)
        n = self.config.max_concurrency if n is None else n
        query: list[list[TaskKind]] = [["query"]] if "workflow" in kinds else []
        if len(kinds) == 1:
            return [kinds] * n + query
        if n == 1:
            return [kinds, *query]
        workflow_cycles = max(1, n // 2)
        workflow: list[TaskKind] = ["workflow"]
        activity: list[TaskKind] = ["activity"]
        return [workflow] * workflow_cycles + [activity] * (n - workflow_cycles) + query

    def _always_polling(self, plan: list[list[TaskKind]]) -> set[int]:
        """The cycles of ``plan`` that never park: the first of each kind, as many as
        ``idle_cycles`` of ``max_concurrency`` would make of it, and every cycle that
        alternates kinds or polls queries."""
        idle = self._plan(min(self.config.idle_cycles, self.config.max_concurrency))
        quota = {kinds[0]: sum(k == kinds for k in idle) for kinds in idle if len(kinds) == 1}
        always: set[int] = set()
        for i, kinds in enumerate(plan):
            if len(kinds) > 1 or kinds[0] == "query" or quota.get(kinds[0], 0) > 0:
                always.add(i)
                if len(kinds) == 1:
                    quota[kinds[0]] = quota.get(kinds[0], 0) - 1
        return always

    async def _pause(self, token: CancellationToken, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(token.wait(), seconds)

    async def _cycle(
        self,
        kinds: list[TaskKind],
        token: CancellationToken,
        report: SupervisorReport,
        *,
        parks: bool,
    ) -> None:
        errors = 0
        turn = 0
        if parks:
            # Beyond the always-polling cycles, a cycle polls when the polls fall behind.
            await self._gate.park(kinds[0])
        # The request id of this cycle's poll of each kind, kept while that poll is
        # retried (it failed transiently: its response may be lost with a task in it).
        poll_ids: dict[TaskKind, str] = {}
        while not token.is_cancelled:
            kind = kinds[turn % len(kinds)]
            turn += 1
            try:
                if kind == "activity":
                    async with self.worker.activity_capacity():
                        claimed = await self._claim_and_execute(kind, token, report, poll_ids)
                else:
                    claimed = await self._claim_and_execute(kind, token, report, poll_ids)
            except DurableRpcError as error:
                errors += 1
                report.errors += 1
                if not is_transient(error):  # an outage is logged once, by the link
                    log.warning("%s cycle failed (backing off): %s", kind, error)
                await self._pause(token, self.config.backoff(errors))
                continue
            except Exception:
                # A bug must not take the whole worker down; back off and keep going.
                errors += 1
                report.errors += 1
                log.exception("%s cycle crashed (backing off)", kind)
                await self._pause(token, self.config.backoff(errors))
                continue
            if claimed:
                errors = 0
                if kind == "workflow":
                    await self.worker.eager_settled(EAGER_HEAD_START_S)
            elif parks and not token.is_cancelled:
                # A whole long poll found nothing: this cycle is not needed for now.
                await self._gate.park(kind)

    async def _claim_and_execute(
        self,
        kind: TaskKind,
        token: CancellationToken,
        report: SupervisorReport,
        poll_ids: dict[TaskKind, str],
    ) -> bool:
        with self._gate.polling(kind):
            task = await self._poll(kind, token, poll_ids)
        if task is None:
            return False
        self._gate.claimed(kind)
        if kind == "query":
            report.queries += 1
            await self.worker.execute_query_task(task)
            return True
        report.claims += 1
        # Claimed tasks are not interrupted by the token: their lease protocol finishes.
        if kind == "workflow":
            report.workflow_tasks += 1
            outcome = await self.worker.execute_workflow_task(task)
        else:
            report.activity_tasks += 1
            outcome = await self.worker.execute_activity_task(task)
        report.count(outcome)
        return True

    async def _poll(
        self, kind: TaskKind, token: CancellationToken, poll_ids: dict[TaskKind, str]
    ) -> Any:
        """One long poll, abandoned if the token is cancelled first.

        Abandoning can lose a task the server claimed at that very instant; its lease
        then lapses and it is claimed again (the price of not waiting out a long poll).
        """
        request_id = poll_ids.get(kind) or poll_ids.setdefault(kind, self.worker.new_poll_id())
        polls = {
            "workflow": lambda: self.worker.poll_workflow_task(request_id),
            "activity": lambda: self.worker.poll_activity_task(request_id),
            "query": self.worker.poll_query_task,
        }
        poll: asyncio.Future[Any] = asyncio.ensure_future(polls[kind]())
        shared = self._stopped
        # One future per run for all polls (not a task per poll: this is a hot path).
        stop = shared if shared is not None else asyncio.ensure_future(token.wait())
        try:
            await asyncio.wait({poll, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if stop is not shared:
                stop.cancel()
        if not poll.done():
            poll.cancel()
            with contextlib.suppress(asyncio.CancelledError, DurableRpcError):
                await poll
            return None
        error = poll.exception()
        if error is None or not is_transient(error):
            # The poll ended (a task, nothing, a definitive error): the next is a new one.
            del poll_ids[kind]
        return poll.result()
