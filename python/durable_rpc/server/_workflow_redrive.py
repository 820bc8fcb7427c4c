"""RedriveWorkflow: a new run continuing a failed run from its last completed
activity (``store/_ops_redrive.py``, the cut in ``store/_redrive_cut.py``). A client call
(``_auth``: the namespace's client access, as a start)."""

from __future__ import annotations

import uuid

import grpc

from durable_rpc.server import _validate
from durable_rpc.store import Store
from durable_rpc.v1 import service_pb2


class WorkflowRedriveMixin:
    _store: Store

    async def RedriveWorkflow(
        self, request: service_pb2.RedriveWorkflowRequest, context: grpc.aio.ServicerContext
    ) -> service_pb2.RedriveWorkflowResponse:
        result = await self._store.redrive_workflow(
            _validate.namespace(request.namespace),
            _validate.name("workflow_id", request.workflow_id),
            _validate.name("run_id", request.run_id, required=False) or None,
            # As a start: without a request id the call is not deduplicated.
            _validate.name("request_id", request.request_id or uuid.uuid4().hex),
        )
        return service_pb2.RedriveWorkflowResponse(
            run_id=result.run_id,
            resumed_after_event_id=result.resumed_after_event_id,
            kept_activities=result.kept_activities,
            started=result.started,
        )
