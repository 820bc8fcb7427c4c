"""ListWorkers, DescribeTaskQueue and ListTaskQueues: the fleet as the store sees it
(``store/_ops_fleet.py``); namespace admin calls (``_auth``)."""

from __future__ import annotations

import grpc

from durable_rpc.server import _convert, _validate
from durable_rpc.server._admin_limits import rate_limit_message
from durable_rpc.store import QueueBacklog, Store, WorkerRecord
from durable_rpc.v1 import admin_service_pb2 as pb
from durable_rpc.v1 import service_pb2


def worker_message(record: WorkerRecord) -> pb.WorkerInfo:
    c = record.counters
    return pb.WorkerInfo(
        worker_id=record.worker_id,
        task_queue=record.task_queue,
        build_id=record.build_id,
        definitions=[
            service_pb2.WorkflowDefinition(name=name, version=version, fingerprint=fingerprint)
            for name, version, fingerprint in record.definitions
        ],
        activities=record.activities,
        register_time=_convert.timestamp(record.registered_at_ms),
        last_heartbeat_time=_convert.timestamp(record.last_heartbeat_ms),
        live=record.live,
        counters=service_pb2.WorkerCounters(
            claims=c.claims,
            completions=c.completions,
            failures=c.failures,
            lease_losses=c.lease_losses,
            slots_in_use=c.slots_in_use,
            slots_total=c.slots_total,
        ),
    )


def backlog_message(backlog: QueueBacklog, now_ms: int) -> pb.TaskQueueBacklog:
    message = pb.TaskQueueBacklog(
        kind=backlog.kind,
        queued=backlog.queued,
        leased=backlog.leased,
        waiting=backlog.waiting,
        recoverable=backlog.recoverable,
        queued_by_priority=dict(backlog.queued_by_priority),
    )
    oldest = backlog.oldest_queued_at_ms
    if oldest is not None:
        message.oldest_queued_time.FromMilliseconds(oldest)
        # Both times are the database clock's (never this process's).
        message.oldest_queued_age.FromMilliseconds(max(0, now_ms - oldest))
    return message


class AdminFleetMixin:
    _store: Store

    async def ListWorkers(
        self, request: pb.ListWorkersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListWorkersResponse:
        workers = await self._store.list_workers(
            _validate.namespace(request.namespace),
            _validate.name("task_queue", request.task_queue, required=False) or None,
            request.include_dead,
        )
        return pb.ListWorkersResponse(workers=[worker_message(w) for w in workers])

    async def ListTaskQueues(
        self, request: pb.ListTaskQueuesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListTaskQueuesResponse:
        queues, truncated = await self._store.list_task_queues(
            _validate.namespace(request.namespace)
        )
        return pb.ListTaskQueuesResponse(
            task_queues=[
                pb.TaskQueueSummary(
                    task_queue=q.task_queue,
                    workflow_queued=q.workflow_queued,
                    activity_queued=q.activity_queued,
                    open_tasks=q.open_tasks,
                    oldest_queued_time=_convert.timestamp(q.oldest_queued_at_ms),
                    workers=q.workers,
                    live_workers=q.live_workers,
                )
                for q in queues
            ],
            truncated=truncated,
        )

    async def DescribeTaskQueue(
        self, request: pb.DescribeTaskQueueRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeTaskQueueResponse:
        queue = await self._store.describe_task_queue(
            _validate.namespace(request.namespace),
            _validate.name("task_queue", request.task_queue),
        )
        return pb.DescribeTaskQueueResponse(
            task_queue=queue.task_queue,
            backlog=[backlog_message(b, queue.now_ms) for b in queue.backlog],
            pollers=[
                pb.TaskQueuePoller(
                    worker_id=w.worker_id,
                    build_id=w.build_id,
                    last_heartbeat_time=_convert.timestamp(w.last_heartbeat_ms),
                    slots_in_use=w.counters.slots_in_use,
                    slots_total=w.counters.slots_total,
                )
                for w in queue.pollers
            ],
            definitions=[
                pb.DefinitionServed(
                    name=d.name,
                    version=d.version,
                    fingerprint=d.fingerprint,
                    build_ids=d.build_ids,
                    live_workers=d.live_workers,
                )
                for d in queue.definitions
            ],
            limit=(
                pb.TaskQueueLimit(
                    task_queue=queue.task_queue,
                    max_concurrent_activities=queue.max_concurrent_activities,
                )
                if queue.max_concurrent_activities is not None
                else None
            ),
            activities_in_use=queue.activities_in_use,
            rate_limits=[rate_limit_message(r) for r in queue.rate_limits],
        )
