"""``durable-rpc schedule create|describe|list|pause|unpause|trigger|backfill|update|delete``
(ScheduleService, a client key in ``DURABLE_RPC_API_KEY``; docs/engine.md "Schedules")."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import click

from durable_rpc import converter
from durable_rpc.cli._admin import (
    _call,
    _duration,
    _print,
    _time,
    address_option,
    json_option,
    parse_duration_ms,
)
from durable_rpc.cli._workflow import _json_args
from durable_rpc.v1 import payload_pb2
from durable_rpc.v1 import schedule_service_pb2 as pb

_HEADERS = ["schedule", "workflow", "spec", "overlap", "paused", "next due"]
_ACTION_HEADERS = ["due", "action", "workflow id", "run id"]
_OVERLAPS = [
    "skip",
    "buffer_one",
    "buffer_all",
    "allow_all",
    "cancel_other",
    "terminate_other",
]

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace of the schedule."
)


def _spec_text(spec: pb.ScheduleSpec) -> str:
    if spec.cron:
        return f"cron {spec.cron} ({spec.timezone or 'UTC'})"
    return f"every {spec.interval.ToMilliseconds() / 1000:g}s"


def _rows(schedules: list[pb.ScheduleDescription]) -> list[list[str]]:
    return [
        [
            s.schedule_id,
            s.definition.workflow_type,
            _spec_text(s.definition.spec),
            pb.ScheduleOverlap.Name(s.definition.overlap).removeprefix("SCHEDULE_OVERLAP_"),
            f"yes: {s.note}" if s.paused else "no",
            _time(s.next_due_times[0], True) if s.next_due_times else "-",
        ]
        for s in schedules
    ]


def _definition_options(fn: Callable[..., Any]) -> Any:
    options = [
        click.option("--workflow", "workflow_type", required=True, help="Workflow type."),
        click.option("--task-queue", required=True, help="Task queue the workers poll."),
        click.option("--input", "input_json", default="[]", help="JSON array: the arguments."),
        click.option("--version", default="1", show_default=True, help="Workflow version."),
        click.option("--cron", default="", help="Cron expression (6 fields: seconds last)."),
        click.option("--interval", default=None, help="Interval, e.g. 90s, 30m, 12h."),
        click.option("--jitter", default=None, help="Random delay of each firing, e.g. 30s."),
        click.option("--timezone", default="UTC", show_default=True, help="IANA time zone."),
        click.option(
            "--overlap",
            type=click.Choice(_OVERLAPS),
            default="skip",
            show_default=True,
            help="What a firing does while the schedule's last run is still open.",
        ),
        click.option("--catchup-window", default=None, help="Missed due times older are skipped."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _definition(
    workflow_type: str,
    task_queue: str,
    input_json: str,
    version: str,
    cron: str,
    interval: str | None,
    jitter: str | None,
    timezone: str,
    overlap: str,
    catchup_window: str | None,
) -> pb.ScheduleDefinition:
    message = pb.ScheduleDefinition(
        workflow_type=workflow_type,
        workflow_version=version,
        task_queue=task_queue,
        input=payload_pb2.Payload(data=converter.encode_args(_json_args(input_json))),
        spec=pb.ScheduleSpec(cron=cron, timezone=timezone),
        overlap=pb.ScheduleOverlap.Value(f"SCHEDULE_OVERLAP_{overlap.upper()}"),
    )
    if interval is not None:
        message.spec.interval.CopyFrom(_duration(parse_duration_ms(interval)))
    if jitter is not None:
        message.spec.jitter.CopyFrom(_duration(parse_duration_ms(jitter)))
    if catchup_window is not None:
        message.catchup_window.CopyFrom(_duration(parse_duration_ms(catchup_window)))
    return message


@click.group()
def schedule() -> None:
    """Start workflows on a cron or interval spec."""


@schedule.command("create")
@click.argument("schedule_id")
@_definition_options
@namespace_option
@address_option
@json_option
def schedule_create(
    schedule_id: str, namespace: str, address: str, as_json: bool, **definition: Any
) -> None:
    """Create schedule SCHEDULE_ID."""
    request = pb.CreateScheduleRequest(
        namespace=namespace, schedule_id=schedule_id, definition=_definition(**definition)
    )
    reply = _call(address, lambda c: c.call(c.schedule_service.CreateSchedule, request))
    _print(reply, as_json, [[schedule_id, "created"]], ["schedule", "result"])


@schedule.command("update")
@click.argument("schedule_id")
@_definition_options
@namespace_option
@address_option
@json_option
def schedule_update(
    schedule_id: str, namespace: str, address: str, as_json: bool, **definition: Any
) -> None:
    """Replace what SCHEDULE_ID starts and when (due times count from now)."""
    request = pb.UpdateScheduleRequest(
        namespace=namespace, schedule_id=schedule_id, definition=_definition(**definition)
    )
    reply = _call(address, lambda c: c.call(c.schedule_service.UpdateSchedule, request))
    _print(reply, as_json, [[schedule_id, "updated"]], ["schedule", "result"])


@schedule.command("describe")
@click.argument("schedule_id")
@namespace_option
@address_option
@json_option
def schedule_describe(schedule_id: str, namespace: str, address: str, as_json: bool) -> None:
    """The schedule, its next due times and its recent actions."""
    request = pb.DescribeScheduleRequest(namespace=namespace, schedule_id=schedule_id)
    reply = _call(address, lambda c: c.call(c.schedule_service.DescribeSchedule, request))
    if as_json:
        _print(reply, True, [], [])
        return
    s = reply.schedule
    _print(reply, False, _rows([s]), _HEADERS)
    _print(reply, False, [[_time(t, True)] for t in s.next_due_times], ["next due times"])
    actions = [
        [_time(a.due_time, True), a.action, a.workflow_id or "-", a.run_id or "-"]
        for a in s.recent_actions
    ]
    _print(reply, False, actions, _ACTION_HEADERS)


@schedule.command("list")
@namespace_option
@address_option
@json_option
def schedule_list(namespace: str, address: str, as_json: bool) -> None:
    """The namespace's schedules (the first 1,000)."""
    request = pb.ListSchedulesRequest(namespace=namespace, page_size=1000)
    reply = _call(address, lambda c: c.call(c.schedule_service.ListSchedules, request))
    _print(reply, as_json, _rows(list(reply.schedules)), _HEADERS)


def _pause(schedule_id: str, paused: bool, note: str, namespace: str, address: str) -> None:
    request = pb.PauseScheduleRequest(
        namespace=namespace, schedule_id=schedule_id, paused=paused, note=note
    )
    _call(address, lambda c: c.call(c.schedule_service.PauseSchedule, request))
    click.echo(f"{schedule_id}: {'paused' if paused else 'unpaused'}")


@schedule.command("pause")
@click.argument("schedule_id")
@click.option("--note", default="", help="Why (shown by describe).")
@namespace_option
@address_option
def schedule_pause(schedule_id: str, note: str, namespace: str, address: str) -> None:
    """Stop firing SCHEDULE_ID until unpaused."""
    _pause(schedule_id, True, note, namespace, address)


@schedule.command("unpause")
@click.argument("schedule_id")
@click.option("--note", default="", help="Shown by describe.")
@namespace_option
@address_option
def schedule_unpause(schedule_id: str, note: str, namespace: str, address: str) -> None:
    """Fire SCHEDULE_ID again from its next due time after now."""
    _pause(schedule_id, False, note, namespace, address)


@schedule.command("trigger")
@click.argument("schedule_id")
@namespace_option
@address_option
def schedule_trigger(schedule_id: str, namespace: str, address: str) -> None:
    """Fire SCHEDULE_ID now (its overlap policy applies)."""
    request = pb.TriggerScheduleRequest(namespace=namespace, schedule_id=schedule_id)
    reply = _call(address, lambda c: c.call(c.schedule_service.TriggerSchedule, request))
    click.echo(f"{schedule_id}: {reply.action}")


def _instant(text: str, hint: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 time", param_hint=hint) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


@schedule.command("backfill")
@click.argument("schedule_id")
@click.option("--start", required=True, help="ISO 8601 (UTC unless it names a zone).")
@click.option("--end", required=True, help="ISO 8601, inclusive.")
@namespace_option
@address_option
def schedule_backfill(schedule_id: str, start: str, end: str, namespace: str, address: str) -> None:
    """Start a run for every due time of SCHEDULE_ID in [--start, --end]."""
    request = pb.BackfillScheduleRequest(namespace=namespace, schedule_id=schedule_id)
    request.start_time.FromDatetime(_instant(start, "--start"))
    request.end_time.FromDatetime(_instant(end, "--end"))
    reply = _call(address, lambda c: c.call(c.schedule_service.BackfillSchedule, request))
    click.echo(f"{schedule_id}: {reply.started} runs started")


@schedule.command("delete")
@click.argument("schedule_id")
@namespace_option
@address_option
def schedule_delete(schedule_id: str, namespace: str, address: str) -> None:
    """Delete SCHEDULE_ID (the runs it started are left alone)."""
    request = pb.DeleteScheduleRequest(namespace=namespace, schedule_id=schedule_id)
    _call(address, lambda c: c.call(c.schedule_service.DeleteSchedule, request))
    click.echo(f"{schedule_id}: deleted")
