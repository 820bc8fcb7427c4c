"""``Saga``: compensations registered as a workflow makes progress, run in reverse order.

Each compensation is an ordinary activity, so it is recorded in history like any other:
a worker crash in the middle of compensating resumes where it stopped, and a
compensation that completed never runs again.

```python
async with workflow.Saga(start_to_close_timeout=timedelta(seconds=30)) as saga:
    await workflow.execute_activity(reserve, order, start_to_close_timeout=...)
    saga.add(release, order)
    await workflow.execute_activity(charge, order, start_to_close_timeout=...)
    saga.add(refund, order)
    await workflow.execute_activity(ship, order, start_to_close_timeout=...)
# ship failed -> refund(order), then release(order), then the error is re-raised
```
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any

from durable_rpc.workflow._api import execute_activity
from durable_rpc.workflow._retry import RetryPolicy


class CompensationError(Exception):
    """One or more compensations failed; ``errors`` lists them in the order they ran.

    Raised from the ``async with`` block (chained to the error that started the
    compensation) or from :meth:`Saga.compensate`.
    """

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(f"{len(errors)} compensation(s) failed: " + "; ".join(map(str, errors)))
        self.errors = errors


@dataclass(frozen=True)
class _Compensation:
    activity: Callable[..., Any] | str
    args: tuple[Any, ...]
    options: dict[str, Any] = field(default_factory=dict)


class Saga:
    """Collects compensating activities and runs them, newest first, on failure.

    ``continue_on_error=True`` keeps compensating after a compensation fails (the
    failures are collected into one :class:`CompensationError`); by default the first
    failing compensation stops the rest, since later ones may depend on it. The
    activity options given here (timeouts, retry policy) apply to every compensation
    unless :meth:`add` overrides them.
    """

    def __init__(
        self,
        *,
        continue_on_error: bool = False,
        start_to_close_timeout: timedelta | None = timedelta(minutes=5),
        schedule_to_close_timeout: timedelta | None = None,
        retry_policy: RetryPolicy | None = None,
        task_queue: str | None = None,
    ) -> None:
        self.continue_on_error = continue_on_error
        self._defaults: dict[str, Any] = {
            "start_to_close_timeout": start_to_close_timeout,
            "schedule_to_close_timeout": schedule_to_close_timeout,
            "retry_policy": retry_policy,
            "task_queue": task_queue,
        }
        self._compensations: list[_Compensation] = []

    def add(self, activity: Callable[..., Any] | str, *args: Any, **options: Any) -> None:
        """Register ``activity(*args)`` as the compensation of the step that just
        succeeded. ``options`` are ``execute_activity`` keyword arguments."""
        self._compensations.append(_Compensation(activity, args, options))

    def clear(self) -> None:
        """Forget the registered compensations (for example once the saga committed)."""
        self._compensations.clear()

    @property
    def pending(self) -> int:
        return len(self._compensations)

    async def compensate(self) -> None:
        """Run the registered compensations newest first, each as a durable activity;
        each runs once (they are removed as they are taken)."""
        errors: list[BaseException] = []
        while self._compensations:
            step = self._compensations.pop()
            options = {**self._defaults, **step.options}
            try:
                await execute_activity(step.activity, *step.args, **options)
            except Exception as exc:
                errors.append(exc)
                if not self.continue_on_error:
                    break
        if errors:
            raise CompensationError(errors)

    async def __aenter__(self) -> Saga:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # CancelledError included: a cancelled workflow undoes its work too (the
        # cancellation was delivered once; the compensations' awaits proceed normally).
        # GeneratorExit is not a failure: a discarded workflow instance's coroutine is
        # being closed, and the run itself goes on elsewhere.
        if not isinstance(exc, Exception | asyncio.CancelledError):
            return
        try:
            await self.compensate()
        except CompensationError as failed:
            raise failed from exc
