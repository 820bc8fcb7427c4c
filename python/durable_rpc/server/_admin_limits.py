"""SetTaskQueueLimit and ListTaskQueueLimits (issue 17, flow control): a task queue's
limit on concurrent activity attempts, enforced by the store's claims
(``store/_queue_limits.py``); namespace admin calls (``_auth``)."""

from __future__ import annotations

import grpc

from durable_rpc.server import _convert, _validate
from durable_rpc.store import Store, TaskQueueLimit
from durable_rpc.v1 import admin_service_pb2 as pb


def limit_message(limit: TaskQueueLimit) -> pb.TaskQueueLimit:
    return pb.TaskQueueLimit(
        task_queue=limit.task_queue,
        max_concurrent_activities=limit.max_concurrent_activities,
        update_time=_convert.timestamp(limit.updated_at_ms),
    )


class AdminLimitsMixin:
    _store: Store

    async def SetTaskQueueLimit(
        self, request: pb.SetTaskQueueLimitRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetTaskQueueLimitResponse:
        # 0 (the field's default) removes the limit; a negative one is the store's
        # INVALID_ARGUMENT, like one above its maximum.
        wanted = request.max_concurrent_activities
        limit = await self._store.set_task_queue_limit(
            _validate.namespace(request.namespace),
            _validate.name("task_queue", request.task_queue),
            None if wanted == 0 else wanted,
        )
        if limit is None:
            return pb.SetTaskQueueLimitResponse()
        return pb.SetTaskQueueLimitResponse(limit=limit_message(limit))

    async def ListTaskQueueLimits(
        self, request: pb.ListTaskQueueLimitsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTaskQueueLimitsResponse:
        limits = await self._store.list_task_queue_limits(_validate.namespace(request.namespace))
        return pb.ListTaskQueueLimitsResponse(limits=[limit_message(limit) for limit in limits])
