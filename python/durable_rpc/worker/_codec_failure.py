"""A claimed task whose payloads the worker's codec cannot decode (docs/engine.md,
"Payload codecs").

The codec runs in the client's channel, so such a task arrives as a ``PayloadCodecError``
from the poll, with the claimed response attached undecoded. Its lease is in there, so
the task is failed under it at once with the codec's reason (PAYLOAD_KEY_UNKNOWN,
PAYLOAD_DECRYPT_FAILED...): a workflow task is retried with its backoff and shows the
reason in describe, history untouched; an activity attempt fails under its retry policy;
a query answers with the failure. Nothing is left claimed until its lease lapses, and an
idempotent poll retry is never handed the same undecodable task again.
"""

from __future__ import annotations

import logging
from typing import Any

from durable_rpc.activity._failure import failure_from_exception
from durable_rpc.errors import DurableRpcError, PayloadCodecError
from durable_rpc.v1 import service_pb2
from durable_rpc.worker._client import WorkerClient, call
from durable_rpc.worker._server_link import ServerLink

log = logging.getLogger("durable_rpc.worker")


async def fail_undecodable(
    client: WorkerClient, worker_id: str, link: ServerLink, error: PayloadCodecError
) -> None:
    """Fails the task ``error.response`` claimed, if it claimed one."""
    response = error.response
    namespace = client.namespace
    failure = failure_from_exception(error)
    method: Any
    request: Any
    if isinstance(response, service_pb2.PollWorkflowTaskResponse) and response.task_id:
        lease = service_pb2.Lease(
            task_id=response.task_id, worker_id=worker_id, fencing_token=response.fencing_token
        )
        method = client.worker_service.FailWorkflowTask
        request = service_pb2.FailWorkflowTaskRequest(
            namespace=namespace, lease=lease, failure=failure
        )
        what = f"workflow task {response.task_id} of {response.workflow_id}"
    elif isinstance(response, service_pb2.PollActivityTaskResponse) and response.task_id:
        lease = service_pb2.Lease(
            task_id=response.task_id, worker_id=worker_id, fencing_token=response.fencing_token
        )
        method = client.worker_service.FailActivityTask
        request = service_pb2.FailActivityTaskRequest(
            namespace=namespace, lease=lease, failure=failure
        )
        what = f"activity task {response.task_id} of {response.workflow_id}"
    elif isinstance(response, service_pb2.PollQueryTaskResponse) and response.query_id:
        method = client.worker_service.RespondQueryTask
        request = service_pb2.RespondQueryTaskRequest(
            namespace=namespace, query_id=response.query_id, worker_id=worker_id, failure=failure
        )
        what = f"query {response.query_id} of {response.workflow_id}"
    else:
        raise error
    log.warning("%s failed: its payloads do not decode: %s", what, error)
    try:
        await call(method, request, link)
    except DurableRpcError as report_error:
        # The lease then lapses and the task is claimed again, as after a crash.
        log.warning("reporting the undecodable %s failed: %s", what, report_error)
