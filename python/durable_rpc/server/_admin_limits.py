"""SetTaskQueueLimit and ListTaskQueueLimits (flow control): a task queue's
limit on concurrent activity attempts, enforced by the store's claims
(``store/_queue_limits.py``); namespace admin calls (``_auth``)."""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2

from durable_rpc.errors import InvalidRateLimitError
from durable_rpc.server import _convert, _validate
from durable_rpc.store import RateLimit, Store, TaskQueueLimit
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


#: RateLimitScope by the store's scope names, and back.
_SCOPE: dict[str, pb.RateLimitScope.ValueType] = {
    "key": pb.RATE_LIMIT_SCOPE_KEY,
    "activity_type": pb.RATE_LIMIT_SCOPE_ACTIVITY_TYPE,
}
_SCOPE_NAME = {value: name for name, value in _SCOPE.items()}


def rate_limit_scope(scope: pb.RateLimitScope.ValueType) -> str:
    """The store's scope for a request's RateLimitScope (unspecified: INVALID_RATE_LIMIT)."""
    name = _SCOPE_NAME.get(scope)
    if name is None:
        raise InvalidRateLimitError("scope must be RATE_LIMIT_SCOPE_KEY or ACTIVITY_TYPE")
    return name


def rate_limit_message(limit: RateLimit) -> pb.RateLimit:
    return pb.RateLimit(
        scope=_SCOPE[limit.scope],
        name=limit.name,
        permits=limit.permits,
        period=duration_pb2.Duration(
            seconds=limit.period_ms // 1000, nanos=limit.period_ms % 1000 * 1_000_000
        ),
        burst=limit.burst,
        next_token_time=_convert.timestamp(limit.next_token_ms),
        update_time=_convert.timestamp(limit.updated_at_ms),
    )


class AdminRateLimitsMixin:
    """SetRateLimit, ListRateLimits and RemoveRateLimit: a namespace's rate limits on
    activity claims, enforced by the store's claims (``store/_rate_limits.py``);
    namespace admin calls (``_auth``)."""

    _store: Store

    async def SetRateLimit(
        self, request: pb.SetRateLimitRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetRateLimitResponse:
        period = request.period
        if period.seconds < 0 or period.nanos < 0 or period.nanos % 1_000_000:
            raise InvalidRateLimitError("period must be a positive whole number of ms")
        limit = await self._store.set_rate_limit(
            _validate.namespace(request.namespace),
            rate_limit_scope(request.scope),
            _validate.name("name", request.name),
            request.permits,
            period.seconds * 1000 + period.nanos // 1_000_000,
            request.burst or None,
        )
        return pb.SetRateLimitResponse(rate_limit=rate_limit_message(limit))

    async def ListRateLimits(
        self, request: pb.ListRateLimitsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRateLimitsResponse:
        limits = await self._store.list_rate_limits(_validate.namespace(request.namespace))
        return pb.ListRateLimitsResponse(rate_limits=[rate_limit_message(x) for x in limits])

    async def RemoveRateLimit(
        self, request: pb.RemoveRateLimitRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemoveRateLimitResponse:
        await self._store.remove_rate_limit(
            _validate.namespace(request.namespace),
            rate_limit_scope(request.scope),
            _validate.name("name", request.name),
        )
        return pb.RemoveRateLimitResponse()
