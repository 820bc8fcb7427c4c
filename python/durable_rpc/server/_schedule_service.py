"""ScheduleService: the gRPC face of the store's schedules (``store/_ops_schedules.py``);
client calls of a namespace (``_auth``)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from google.protobuf import timestamp_pb2

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.server import _convert, _validate
from durable_rpc.store import Store
from durable_rpc.store._schedule_records import ScheduleDefinition, ScheduleInfo
from durable_rpc.store._schedule_spec import ScheduleSpec
from durable_rpc.v1 import payload_pb2, schedule_service_pb2_grpc
from durable_rpc.v1 import schedule_service_pb2 as pb

DEFAULT_PAGE = 100
DAY_MS = 24 * 3600 * 1000
_OVERLAP = {
    pb.SCHEDULE_OVERLAP_UNSPECIFIED: "SKIP",
    pb.SCHEDULE_OVERLAP_SKIP: "SKIP",
    pb.SCHEDULE_OVERLAP_BUFFER_ONE: "BUFFER_ONE",
    pb.SCHEDULE_OVERLAP_ALLOW_ALL: "ALLOW_ALL",
    pb.SCHEDULE_OVERLAP_TERMINATE_OTHER: "TERMINATE_OTHER",
    pb.SCHEDULE_OVERLAP_BUFFER_ALL: "BUFFER_ALL",
    pb.SCHEDULE_OVERLAP_CANCEL_OTHER: "CANCEL_OTHER",
}
_OVERLAP_PB = {name: value for value, name in _OVERLAP.items() if value}


def definition_from(message: pb.ScheduleDefinition) -> ScheduleDefinition:
    if message.overlap not in _OVERLAP:
        raise InvalidArgumentError(f"unknown overlap policy {message.overlap}")
    spec = message.spec
    return ScheduleDefinition(
        workflow_type=_validate.name("workflow_type", message.workflow_type),
        workflow_version=message.workflow_version,
        task_queue=_validate.name("task_queue", message.task_queue),
        input=_validate.payload_bytes(
            "input", message.input, has=message.HasField("input"), external=False
        ),
        spec=ScheduleSpec(
            cron=spec.cron,
            interval_ms=spec.interval.ToMilliseconds(),
            timezone=spec.timezone or "UTC",
            jitter_ms=spec.jitter.ToMilliseconds(),
        ),
        overlap=_OVERLAP[message.overlap],
        catchup_window_ms=(
            message.catchup_window.ToMilliseconds()
            if message.HasField("catchup_window")
            else 365 * DAY_MS
        ),
    )


def _timestamp(ms: int) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromMilliseconds(ms)
    return ts


def description(info: ScheduleInfo) -> pb.ScheduleDescription:
    d = info.definition
    definition = pb.ScheduleDefinition(
        workflow_type=d.workflow_type,
        workflow_version=d.workflow_version,
        task_queue=d.task_queue,
        input=payload_pb2.Payload.FromString(d.input),
        spec=pb.ScheduleSpec(cron=d.spec.cron, timezone=d.spec.timezone),
        overlap=_OVERLAP_PB[d.overlap],
    )
    if d.spec.interval_ms:
        definition.spec.interval.FromMilliseconds(d.spec.interval_ms)
    if d.spec.jitter_ms:
        definition.spec.jitter.FromMilliseconds(d.spec.jitter_ms)
    definition.catchup_window.FromMilliseconds(d.catchup_window_ms)
    return pb.ScheduleDescription(
        schedule_id=info.schedule_id,
        definition=definition,
        paused=info.paused,
        note=info.note,
        create_time=_convert.timestamp(info.created_at_ms),
        next_due_times=[_timestamp(ms) for ms in info.next_due_ms],
        recent_actions=[
            pb.ScheduleAction(
                due_time=_convert.timestamp(a.due_ms),
                action=a.action,
                workflow_id=a.workflow_id,
                run_id=a.run_id,
                action_time=_convert.timestamp(a.at_ms),
            )
            for a in info.recent_actions
        ],
    )


class ScheduleService(schedule_service_pb2_grpc.ScheduleServiceServicer):
    def __init__(self, store: Store, wake: Callable[[], None]) -> None:
        self._store = store
        #: Tells this server's schedule loop that a due slot changed.
        self._wake = wake

    async def CreateSchedule(
        self, request: pb.CreateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateScheduleResponse:
        await self._store.create_schedule(
            _validate.namespace(request.namespace),
            _validate.name("schedule_id", request.schedule_id),
            definition_from(request.definition),
        )
        self._wake()
        return pb.CreateScheduleResponse()

    async def DescribeSchedule(
        self, request: pb.DescribeScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeScheduleResponse:
        info = await self._store.describe_schedule(
            _validate.namespace(request.namespace),
            _validate.name("schedule_id", request.schedule_id),
        )
        return pb.DescribeScheduleResponse(schedule=description(info))

    async def ListSchedules(
        self, request: pb.ListSchedulesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSchedulesResponse:
        size = request.page_size or DEFAULT_PAGE
        found = await self._store.list_schedules(
            _validate.namespace(request.namespace),
            size,
            _validate.name("next_page_token", request.next_page_token, required=False),
        )
        return pb.ListSchedulesResponse(
            schedules=[description(info) for info in found],
            next_page_token=found[-1].schedule_id if len(found) == size else "",
        )

    async def UpdateSchedule(
        self, request: pb.UpdateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateScheduleResponse:
        await self._store.update_schedule(
            _validate.namespace(request.namespace),
            _validate.name("schedule_id", request.schedule_id),
            definition_from(request.definition),
        )
        self._wake()
        return pb.UpdateScheduleResponse()

    async def PauseSchedule(
        self, request: pb.PauseScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.PauseScheduleResponse:
        await self._store.pause_schedule(
            _validate.namespace(request.namespace),
            _validate.name("schedule_id", request.schedule_id),
            request.paused,
            request.note,
        )
        self._wake()
        return pb.PauseScheduleResponse()

    async def TriggerSchedule(
        self, request: pb.TriggerScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.TriggerScheduleResponse:
        action = await self._store.trigger_schedule(
            _validate.namespace(request.namespace),
            _validate.name("schedule_id", request.schedule_id),
        )
        if action == "buffered":
            self._wake()  # the loop learns which run's close to look again at
        return pb.TriggerScheduleResponse(action=action)

    async def BackfillSchedule(
        self, request: pb.BackfillScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.BackfillScheduleResponse:
        if not (request.HasField("start_time") and request.HasField("end_time")):
            raise InvalidArgumentError("a backfill needs start_time and end_time")
        started = await self._store.backfill_schedule(
            _validate.namespace(request.namespace),
            _validate.name("schedule_id", request.schedule_id),
            request.start_time.ToMilliseconds(),
            request.end_time.ToMilliseconds(),
        )
        return pb.BackfillScheduleResponse(started=started)

    async def DeleteSchedule(
        self, request: pb.DeleteScheduleRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteScheduleResponse:
        await self._store.delete_schedule(
            _validate.namespace(request.namespace),
            _validate.name("schedule_id", request.schedule_id),
        )
        return pb.DeleteScheduleResponse()
