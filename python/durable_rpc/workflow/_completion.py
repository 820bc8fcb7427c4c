"""The end of the run: the terminal command (complete, fail, cancel or continue as
new) once the main coroutine or a signal handler is done."""

from __future__ import annotations

import logging

from durable_rpc import converter, payload
from durable_rpc.activity._failure import failure_from_exception
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from durable_rpc.workflow._errors import ContinueAsNewError
from durable_rpc.workflow._instance import InstanceState

log = logging.getLogger("durable_rpc.workflow")


class CompletionMixin(InstanceState):
    """Turns how the run ended into its terminal command."""

    def _finish_if_done(self) -> None:
        if self._finished:
            return
        if self._handler_error is not None:
            self._fail(self._handler_error)
            return
        main = self._main
        if main is None or not main.done():
            return
        if main.cancelled():
            self._terminal(
                workflow_task_pb2.Command(cancel_workflow=workflow_task_pb2.CancelWorkflow())
            )
            return
        error = main.exception()
        if isinstance(error, ContinueAsNewError):
            self._continue_as_new(error)
            return
        if error is not None:
            self._fail(error)
            return
        try:
            result = converter.encode(main.result())
        except payload.PayloadError as exc:
            self._fail(exc)
            return
        self._terminal(
            workflow_task_pb2.Command(
                complete_workflow=workflow_task_pb2.CompleteWorkflow(
                    result=payload_pb2.Payload(data=result)
                )
            )
        )

    def _continue_as_new(self, request: ContinueAsNewError) -> None:
        try:
            data = converter.encode_args(request.new_args)
        except payload.PayloadError as exc:
            self._fail(exc)
            return
        self._terminal(
            workflow_task_pb2.Command(
                continue_as_new=workflow_task_pb2.ContinueAsNew(
                    input=payload_pb2.Payload(data=data),
                    task_queue=request.task_queue,
                    workflow_type=request.workflow_type,
                    workflow_version=request.workflow_version,
                )
            )
        )

    def _fail(self, error: BaseException) -> None:
        if not self.is_replaying:
            log.info("workflow failed: %r", error)
        self._terminal(
            workflow_task_pb2.Command(
                fail_workflow=workflow_task_pb2.FailWorkflow(failure=failure_from_exception(error))
            )
        )

    def _terminal(self, command: workflow_task_pb2.Command) -> None:
        self._emit(command)
        self._finished = True
