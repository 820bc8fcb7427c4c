"""Schedules from the client: ``client.create_schedule(id, Wf.run, *args, spec=...)`` and
the calls around it (ScheduleService, docs/engine.md "Schedules")."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc

from durable_rpc import converter
from durable_rpc.client._refs import workflow_ref
from durable_rpc.v1 import payload_pb2, schedule_service_pb2_grpc
from durable_rpc.v1 import schedule_service_pb2 as pb


class ScheduleOverlap(enum.Enum):
    """What a due time does while the schedule's last run is still open: SKIP it;
    BUFFER_ONE (the newest waits) or BUFFER_ALL (every one waits, started oldest first) for
    the run to close; ALLOW_ALL (start anyway); CANCEL_OTHER (request the open run's
    cancellation, start when it closed); TERMINATE_OTHER (terminate it, start now)."""

    SKIP = pb.SCHEDULE_OVERLAP_SKIP
    BUFFER_ONE = pb.SCHEDULE_OVERLAP_BUFFER_ONE
    BUFFER_ALL = pb.SCHEDULE_OVERLAP_BUFFER_ALL
    ALLOW_ALL = pb.SCHEDULE_OVERLAP_ALLOW_ALL
    CANCEL_OTHER = pb.SCHEDULE_OVERLAP_CANCEL_OTHER
    TERMINATE_OTHER = pb.SCHEDULE_OVERLAP_TERMINATE_OTHER


@dataclass(frozen=True)
class ScheduleSpec:
    """Exactly one of ``cron`` (croniter syntax; 6 fields = seconds last) or
    ``interval``; ``timezone`` is the IANA zone cron is read in."""

    cron: str = ""
    interval: timedelta | None = None
    jitter: timedelta | None = None
    timezone: str = "UTC"


@dataclass(frozen=True)
class ScheduleActionInfo:
    due_time: datetime
    action: str
    workflow_id: str
    run_id: str


@dataclass(frozen=True)
class ScheduleDescription:
    schedule_id: str
    workflow_type: str
    task_queue: str
    spec: ScheduleSpec
    overlap: ScheduleOverlap
    paused: bool
    note: str
    next_due_times: list[datetime] = field(default_factory=list)
    recent_actions: list[ScheduleActionInfo] = field(default_factory=list)


def _time(ts: Any) -> datetime:
    return datetime.fromtimestamp(ts.ToMilliseconds() / 1000, tz=UTC)


def _definition(
    workflow: Callable[..., Any] | str,
    args: tuple[Any, ...],
    task_queue: str,
    spec: ScheduleSpec,
    overlap: ScheduleOverlap,
    catchup_window: timedelta | None,
    version: str | None,
) -> pb.ScheduleDefinition:
    workflow_type, defn_version, _ = workflow_ref(workflow)
    message = pb.ScheduleDefinition(
        workflow_type=workflow_type,
        workflow_version=version or defn_version,
        task_queue=task_queue,
        input=payload_pb2.Payload(data=converter.encode_args(args)),
        spec=pb.ScheduleSpec(cron=spec.cron, timezone=spec.timezone),
        overlap=overlap.value,
    )
    if spec.interval is not None:
        message.spec.interval.FromTimedelta(spec.interval)
    if spec.jitter is not None:
        message.spec.jitter.FromTimedelta(spec.jitter)
    if catchup_window is not None:
        message.catchup_window.FromTimedelta(catchup_window)
    return message


def _description(message: pb.ScheduleDescription) -> ScheduleDescription:
    d = message.definition
    return ScheduleDescription(
        schedule_id=message.schedule_id,
        workflow_type=d.workflow_type,
        task_queue=d.task_queue,
        spec=ScheduleSpec(
            cron=d.spec.cron,
            interval=d.spec.interval.ToTimedelta() if d.spec.HasField("interval") else None,
            jitter=d.spec.jitter.ToTimedelta() if d.spec.HasField("jitter") else None,
            timezone=d.spec.timezone,
        ),
        overlap=ScheduleOverlap(d.overlap),
        paused=message.paused,
        note=message.note,
        next_due_times=[_time(t) for t in message.next_due_times],
        recent_actions=[
            ScheduleActionInfo(_time(a.due_time), a.action, a.workflow_id, a.run_id)
            for a in message.recent_actions
        ],
    )


class ScheduleCalls:
    """The schedule methods of :class:`~durable_rpc.Client`."""

    channel: grpc.aio.Channel
    namespace: str
    call: Callable[..., Any]

    @property
    def schedule_service(self) -> schedule_service_pb2_grpc.ScheduleServiceStub:
        return schedule_service_pb2_grpc.ScheduleServiceStub(self.channel)

    async def create_schedule(
        self,
        id: str,
        workflow: Callable[..., Any] | str,
        *args: Any,
        spec: ScheduleSpec,
        task_queue: str,
        overlap: ScheduleOverlap = ScheduleOverlap.SKIP,
        catchup_window: timedelta | None = None,
        version: str | None = None,
    ) -> None:
        """Start ``workflow(*args)`` at every due time of ``spec``; each due time starts
        one run, with workflow id ``<id>-<due time, UTC ISO 8601>``."""
        definition = _definition(workflow, args, task_queue, spec, overlap, catchup_window, version)
        await self.call(
            self.schedule_service.CreateSchedule,
            pb.CreateScheduleRequest(
                namespace=self.namespace, schedule_id=id, definition=definition
            ),
        )

    async def update_schedule(
        self,
        id: str,
        workflow: Callable[..., Any] | str,
        *args: Any,
        spec: ScheduleSpec,
        task_queue: str,
        overlap: ScheduleOverlap = ScheduleOverlap.SKIP,
        catchup_window: timedelta | None = None,
        version: str | None = None,
    ) -> None:
        definition = _definition(workflow, args, task_queue, spec, overlap, catchup_window, version)
        await self.call(
            self.schedule_service.UpdateSchedule,
            pb.UpdateScheduleRequest(
                namespace=self.namespace, schedule_id=id, definition=definition
            ),
        )

    async def describe_schedule(self, id: str) -> ScheduleDescription:
        response = await self.call(
            self.schedule_service.DescribeSchedule,
            pb.DescribeScheduleRequest(namespace=self.namespace, schedule_id=id),
        )
        return _description(response.schedule)

    async def list_schedules(self) -> list[ScheduleDescription]:
        found: list[ScheduleDescription] = []
        token = ""
        while True:
            response = await self.call(
                self.schedule_service.ListSchedules,
                pb.ListSchedulesRequest(namespace=self.namespace, next_page_token=token),
            )
            found += [_description(s) for s in response.schedules]
            token = response.next_page_token
            if not token:
                return found

    async def pause_schedule(self, id: str, note: str = "", *, paused: bool = True) -> None:
        await self.call(
            self.schedule_service.PauseSchedule,
            pb.PauseScheduleRequest(
                namespace=self.namespace, schedule_id=id, paused=paused, note=note
            ),
        )

    async def unpause_schedule(self, id: str, note: str = "") -> None:
        await self.pause_schedule(id, note, paused=False)

    async def trigger_schedule(self, id: str) -> str:
        """Fire now (the overlap policy applies); returns started, skipped or buffered."""
        response = await self.call(
            self.schedule_service.TriggerSchedule,
            pb.TriggerScheduleRequest(namespace=self.namespace, schedule_id=id),
        )
        return str(response.action)

    async def backfill_schedule(self, id: str, start: datetime, end: datetime) -> int:
        """Start the due times in [start, end]; returns how many runs started."""
        request = pb.BackfillScheduleRequest(namespace=self.namespace, schedule_id=id)
        request.start_time.FromDatetime(start)
        request.end_time.FromDatetime(end)
        response = await self.call(self.schedule_service.BackfillSchedule, request)
        return int(response.started)

    async def delete_schedule(self, id: str) -> None:
        await self.call(
            self.schedule_service.DeleteSchedule,
            pb.DeleteScheduleRequest(namespace=self.namespace, schedule_id=id),
        )
