"""Cooperative cancellation, as the runtime tracks it: the run's cancellation request
(``workflow.cancellation()``), its delivery to the main coroutine, and the shields that
defer that delivery (``workflow.shield()``).

A request comes as a CancelWorkflow job (from the CancelRequested event: its reason,
time and cleanup deadline, so every replay reads the same). It is delivered as
asyncio cancellation of the main coroutine, at once, or when the last open shield of
the run closes: code inside a shield (cleanup, typically) and the activities, timers
and children it awaits keep running. What a cancelled await does with its operation is
that call's :class:`CancellationPolicy`.
"""

from __future__ import annotations

import enum
from datetime import UTC
from types import TracebackType

from durable_rpc.v1 import workflow_task_pb2
from durable_rpc.workflow._instance import InstanceState
from durable_rpc.workflow._values import CancellationRequest

__all__ = [
    "CancellationMixin",
    "CancellationPolicy",
    "CancellationRequest",
    "Shield",
    "check_policy",
]


class CancellationPolicy(enum.Enum):
    """What a cancelled ``await`` of an activity or child workflow does with it.

    Activities default to ``TRY_CANCEL``, children to ``ABANDON``."""

    #: Ask it to stop (RequestCancelActivity / RequestCancelChildWorkflow) and raise
    #: CancelledError at once; its later outcome is dropped.
    TRY_CANCEL = "TRY_CANCEL"
    #: Ask it to stop and wait for its outcome: CancelledError once it was cancelled, its
    #: result if it completed anyway (a child: once it closed).
    WAIT_CANCELLATION_COMPLETED = "WAIT_CANCELLATION_COMPLETED"
    #: Ask nothing: it keeps running, its outcome is dropped; CancelledError at once.
    ABANDON = "ABANDON"


def check_policy(policy: object) -> None:
    if not isinstance(policy, CancellationPolicy):
        raise TypeError(f"cancellation must be a workflow.CancellationPolicy, got {policy!r}")


class CancellationMixin(InstanceState):
    """The run's cancellation request and the shields that defer its delivery."""

    def _cancel(self, job: workflow_task_pb2.CancelWorkflowJob) -> None:
        if self.cancellation_request is not None:
            return  # the store records one request per run; a replayed one is the same
        requested_at = (
            job.requested_at.ToDatetime(tzinfo=UTC) if job.HasField("requested_at") else self._now
        )
        deadline = (
            job.cleanup_deadline.ToDatetime(tzinfo=UTC)
            if job.HasField("cleanup_deadline")
            else None
        )
        self.cancellation_request = CancellationRequest(job.reason, requested_at, deadline)
        # A request recorded before cooperative cancellation: the server had told every
        # activity of the run to stop, and awaited ones were abandoned without a command
        # (what request_cancel_activity does while this is set), so such histories replay.
        self._run_cancelled = not job.cooperative
        if self._shields:
            self._cancel_deferred = True
        else:
            self._deliver_cancel()

    def _deliver_cancel(self) -> None:
        self._cancel_deferred = False
        request = self.cancellation_request
        if request is not None and self._main is not None and not self._main.done():
            self._main.cancel(request.reason or None)

    def enter_shield(self) -> None:
        self._refuse_in_query()
        self._shields += 1

    def exit_shield(self) -> None:
        self._shields -= 1
        if self._shields == 0 and self._cancel_deferred:
            # A request that arrived inside: delivered now, at the next await of the
            # main coroutine (a running task's cancel() takes effect there).
            self._deliver_cancel()


class Shield:
    """``with workflow.shield():`` (or ``async with``): the run's cancellation is not
    delivered while the block runs; one requested meanwhile is delivered when it exits.
    Shields nest; the last one to exit delivers."""

    def __init__(self, instance: CancellationMixin) -> None:
        self._instance = instance
        self._entered = False

    def __enter__(self) -> Shield:
        if self._entered:
            raise RuntimeError("a workflow.shield() can be entered once")
        self._instance.enter_shield()
        self._entered = True
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._instance.exit_shield()

    async def __aenter__(self) -> Shield:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
