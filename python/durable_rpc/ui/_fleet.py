"""The task queues, workers, schedules and namespaces pages (the AdminService and
ScheduleService calls the CLI makes: cli/_fleet.py, cli/_schedule.py, cli/_admin.py)."""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from durable_rpc.errors import DurableRpcError, PermissionDeniedError
from durable_rpc.ui import _values
from durable_rpc.ui._web import Page
from durable_rpc.v1 import admin_service_pb2, schedule_service_pb2

#: Schedules described (next and recent runs) on one page.
SCHEDULES_SHOWN = 100


def _ms(message: Any, field: str) -> int | None:
    return _values.time_ms(getattr(message, field)) if message.HasField(field) else None


async def task_queues_page(page: Page) -> Response:
    denied = page.denied("the task queues page")
    if denied is not None:
        return await page.render("error.html", status=403, message=denied)
    client = await page.client()
    listed = await client.call(
        client.admin_service.ListTaskQueues,
        admin_service_pb2.ListTaskQueuesRequest(namespace=page.namespace),
    )
    queues = [
        {
            "name": q.task_queue,
            "workflows": q.workflow_queued,
            "activities": q.activity_queued,
            "open": q.open_tasks,
            "oldest": _ms(q, "oldest_queued_time"),
            "workers": q.workers,
            "live": q.live_workers,
        }
        for q in listed.task_queues
    ]
    chosen = page.request.query_params.get("queue", "").strip() or (
        queues[0]["name"] if queues else ""
    )
    described = None
    if chosen:
        described = await client.call(
            client.admin_service.DescribeTaskQueue,
            admin_service_pb2.DescribeTaskQueueRequest(namespace=page.namespace, task_queue=chosen),
        )
    return await page.render(
        "task_queues.html",
        queues=queues,
        truncated=listed.truncated,
        chosen=chosen,
        queue=described,
        backlog=[
            {
                "kind": b.kind,
                "queued": b.queued,
                "leased": b.leased,
                "waiting": b.waiting,
                "recoverable": b.recoverable,
                "oldest_age_ms": b.oldest_queued_age.ToMilliseconds()
                if b.HasField("oldest_queued_age")
                else None,
                "by_priority": sorted(b.queued_by_priority.items()),
            }
            for b in (described.backlog if described is not None else [])
        ],
        pollers=[
            {
                "worker": p.worker_id,
                "build": p.build_id,
                "heartbeat": _ms(p, "last_heartbeat_time"),
                "slots": f"{p.slots_in_use}/{p.slots_total}",
            }
            for p in (described.pollers if described is not None else [])
        ],
        builds=sorted({p.build_id for p in (described.pollers if described else [])}),
    )


async def workers_page(page: Page) -> Response:
    denied = page.denied("the workers page")
    if denied is not None:
        return await page.render("error.html", status=403, message=denied)
    client = await page.client()
    reply = await client.call(
        client.admin_service.ListWorkers,
        admin_service_pb2.ListWorkersRequest(namespace=page.namespace, include_dead=True),
    )
    return await page.render(
        "workers.html",
        workers=[
            {
                "id": w.worker_id,
                "queue": w.task_queue,
                "build": w.build_id,
                "live": w.live,
                "heartbeat": _ms(w, "last_heartbeat_time"),
                "registered": _ms(w, "register_time"),
                "counters": w.counters,
                "definitions": ", ".join(f"{d.name}@{d.version}" for d in w.definitions),
            }
            for w in reply.workers
        ],
    )


async def schedules_page(page: Page) -> Response:
    client = await page.client()
    listed = await client.call(
        client.schedule_service.ListSchedules,
        schedule_service_pb2.ListSchedulesRequest(
            namespace=page.namespace, page_size=SCHEDULES_SHOWN
        ),
    )
    schedules = []
    for item in listed.schedules:
        described = await client.call(
            client.schedule_service.DescribeSchedule,
            schedule_service_pb2.DescribeScheduleRequest(
                namespace=page.namespace, schedule_id=item.schedule_id
            ),
        )
        s = described.schedule
        spec = s.definition.spec
        schedules.append(
            {
                "id": s.schedule_id,
                "type": s.definition.workflow_type,
                "queue": s.definition.task_queue,
                "spec": spec.cron or _values.duration_text(spec.interval.ToMilliseconds()),
                "paused": s.paused,
                "note": s.note,
                "next": [_values.time_ms(t) for t in s.next_due_times[:5]],
                "recent": [
                    {
                        "due": _ms(a, "due_time"),
                        "action": a.action,
                        "workflow_id": a.workflow_id,
                        "run_id": a.run_id,
                    }
                    for a in s.recent_actions[:5]
                ],
            }
        )
    return await page.render(
        "schedules.html",
        schedules=schedules,
        more=bool(listed.next_page_token),
        pause_denied=page.denied("pausing a schedule"),
    )


async def namespaces_page(page: Page) -> Response:
    client = await page.client()
    listed = await client.call(
        client.admin_service.ListNamespaces, admin_service_pb2.ListNamespacesRequest()
    )
    rows = []
    for n in listed.namespaces:
        limits: str
        try:
            admission = await client.call(
                client.admin_service.GetNamespaceAdmission,
                admin_service_pb2.GetNamespaceAdmissionRequest(namespace=n.name),
            )
            limits = _admission_text(admission)
        except PermissionDeniedError:
            limits = "(needs the admin role)"
        except DurableRpcError as exc:
            limits = f"(unavailable: {exc.reason})"
        rows.append(
            {
                "name": n.name,
                "description": n.description,
                "retention": _values.duration_text(n.retention.ToMilliseconds()),
                "created": _ms(n, "create_time"),
                "limits": limits,
            }
        )
    return await page.render("namespaces.html", rows=rows)


def _admission_text(reply: admin_service_pb2.GetNamespaceAdmissionResponse) -> str:
    if not reply.HasField("admission"):
        return "none (every start is admitted)"
    a = reply.admission
    parts = []
    if a.max_open_runs:
        parts.append(f"at most {a.max_open_runs} open runs ({a.open_runs} open)")
    if a.starts_per_period:
        parts.append(
            f"{a.starts_per_period} starts per {_values.duration_text(a.period.ToMilliseconds())}"
        )
    if a.waiting_runs:
        parts.append(f"{a.waiting_runs} waiting")
    return "; ".join(parts) or "none"
