"""Updates: validated (live only), accepted with an AcceptUpdate command, run as a task
of their own and completed with a CompleteUpdate command."""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any

from durable_rpc import converter, payload
from durable_rpc.activity._failure import failure_from_exception
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from durable_rpc.workflow._definition import UpdateDefinition
from durable_rpc.workflow._errors import RestrictedOperationError
from durable_rpc.workflow._instance import InstanceState
from durable_rpc.workflow._values import payload_data

log = logging.getLogger("durable_rpc.workflow")


class UpdatesMixin(InstanceState):
    """Update validation, acceptance and completion."""

    def _do_update(self, job: workflow_task_pb2.DoUpdateJob) -> None:
        """Validate (live only) and accept update ``job``, then start its handler.

        A replayed job comes from a recorded UpdateAccepted: the validator already
        accepted it, so only the handler runs. A live job the validator rejects is kept
        in :attr:`rejected_updates` and produces no command."""
        update_id = job.update_id
        if update_id in self._updates_seen:
            return  # already accepted by this run: the handler never runs twice
        definition = self.definition.updates.get(job.update_name)
        data = payload_data(job.input)
        if job.validate:
            rejection = self._validate_update(job.update_name, definition, data)
            if rejection is not None:
                if not self.is_replaying:
                    log.info("update %r (%s) rejected: %r", job.update_name, update_id, rejection)
                self.rejected_updates.append((update_id, failure_from_exception(rejection)))
                return
        if definition is None:
            # Recorded but no longer handled: emit nothing, so the replay machine names
            # the divergence (expected AcceptUpdate, got nothing).
            return
        self._updates_seen.add(update_id)
        self._emit(
            workflow_task_pb2.Command(
                accept_update=workflow_task_pb2.AcceptUpdate(
                    update_id=update_id,
                    update_name=job.update_name,
                    input=payload_pb2.Payload(data=data),
                )
            )
        )
        handler = definition.method.__get__(self._obj)

        async def run_update() -> Any:
            args = converter.decode_args(data, definition.arg_hints)
            result = handler(*args)
            if inspect.isawaitable(result):
                result = await result
            return result

        task = self.loop.create_task(run_update(), name=f"update:{job.update_name}")
        task.add_done_callback(lambda done: self._on_update_done(update_id, done))

    def _validate_update(
        self, name: str, definition: UpdateDefinition | None, data: bytes
    ) -> Exception | None:
        """Why the update must be rejected (None: accept it)."""
        if definition is None:
            known = ", ".join(sorted(self.definition.updates)) or "none"
            return UnknownUpdateError(
                f"workflow {self.definition.name!r} has no update {name!r} (known: {known})"
            )
        if self.info is None or self._obj is None or isinstance(self._obj, Exception):
            return UnknownUpdateError("the workflow has not started: it cannot take updates")
        if self._finished:
            return UnknownUpdateError("the workflow already finished: it cannot take updates")
        try:
            args = converter.decode_args(data, definition.arg_hints)
        except Exception as exc:
            return exc
        if definition.validator is None:
            return None
        validator = definition.validator.__get__(self._obj)
        # A validator only reads state: producing a command rejects the update.
        self._querying = f"validator of update {name!r}"
        try:
            result = validator(*args)
            if asyncio.iscoroutine(result):
                result.close()
                return RestrictedOperationError(f"the validator of update {name!r} is async")
        except Exception as exc:
            return exc
        finally:
            self._querying = None
        return None

    def _on_update_done(self, update_id: str, task: asyncio.Task[Any]) -> None:
        outcome = workflow_task_pb2.CompleteUpdate(update_id=update_id)
        if task.cancelled():
            outcome.failure.CopyFrom(failure_from_exception(asyncio.CancelledError()))
        elif (error := task.exception()) is not None:
            outcome.failure.CopyFrom(failure_from_exception(error))
        else:
            try:
                outcome.result.data = converter.encode(task.result())
            except payload.PayloadError as exc:
                outcome.failure.CopyFrom(failure_from_exception(exc))
        self._emit(workflow_task_pb2.Command(complete_update=outcome))


class UnknownUpdateError(Exception):
    """The update cannot be delivered (unknown name, run not started or finished)."""
