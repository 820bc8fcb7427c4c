"""The runs list and the run detail pages."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import time
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

from starlette.responses import Response

from durable_rpc.errors import DurableRpcError, UnauthenticatedError
from durable_rpc.run_statuses import STATUS_NAMES, STATUS_VALUES, STATUSES
from durable_rpc.ui import _timeline, _values
from durable_rpc.ui._web import BadInput, Page, run_path
from durable_rpc.v1 import history_pb2, service_pb2

PAGE_SIZE = 50
#: Events shown on one page of a run's event list (each may carry decoded payloads).
EVENT_PAGE = 200


_Filtered = TypeVar(
    "_Filtered", service_pb2.ListWorkflowsRequest, service_pb2.CountWorkflowsRequest
)


def status_name(value: service_pb2.WorkflowStatus.ValueType) -> str:
    return STATUS_NAMES.get(value, "unknown")


@dataclass(frozen=True)
class RunFilters:
    status: str
    workflow_type: str
    started_after: str
    started_before: str
    query: str

    @classmethod
    def parse(cls, params: Any) -> RunFilters:
        status = params.get("status", "")
        if status and status not in STATUS_VALUES:
            raise BadInput(f"unknown status {status!r}: one of {', '.join(STATUSES)}")
        return cls(
            status=status,
            workflow_type=params.get("type", "").strip(),
            started_after=params.get("after", "").strip(),
            started_before=params.get("before", "").strip(),
            query=params.get("q", "").strip(),
        )

    def request(self, namespace: str) -> service_pb2.ListWorkflowsRequest:
        """The page's list: every filter, the status included."""
        request = self._fill(service_pb2.ListWorkflowsRequest(namespace=namespace))
        if self.status:
            request.status = STATUS_VALUES[self.status]
        return request

    def count_request(self, namespace: str) -> service_pb2.CountWorkflowsRequest:
        """The counts by status: every filter but the status (each count links to the
        list of its status)."""
        return self._fill(service_pb2.CountWorkflowsRequest(namespace=namespace))

    def _fill(self, request: _Filtered) -> _Filtered:
        request.workflow_type = self.workflow_type
        request.query = self.query
        for text, field in (
            (self.started_after, "started_after"),
            (self.started_before, "started_before"),
        ):
            if text:
                getattr(request, field).FromMilliseconds(_time_input_ms(text, field))
        return request


def _time_input_ms(text: str, what: str) -> int:
    """A ``datetime-local`` input (``2026-01-31T12:30``, read as UTC) as epoch ms."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(
            f"{what.replace('_', ' ')}: {text!r} is not a time like 2026-01-31T12:30 (UTC)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def _page_token(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode(), altchars=b"-_", validate=True) if text else b""
    except (binascii.Error, ValueError):
        raise BadInput("the page link is malformed: start again from the first page") from None


async def runs_page(page: Page) -> Response:
    params = page.request.query_params
    try:
        filters = RunFilters.parse(params)
    except BadInput as exc:
        return await page.render("runs.html", status=400, error=str(exc), **_empty(params))
    client = await page.client()
    try:
        request = filters.request(page.namespace)
        request.page_size = PAGE_SIZE
        request.next_page_token = _page_token(params.get("page", ""))
        reply = await client.call(client.workflow_service.ListWorkflows, request)
        counted = await client.call(
            client.workflow_service.CountWorkflows, filters.count_request(page.namespace)
        )
    except UnauthenticatedError:
        raise  # a revoked or expired key: _web.page sends the visitor to sign in
    except (BadInput, DurableRpcError) as exc:
        # A malformed query or time is answered on the page, above the filters.
        message = str(exc)
        status = 400 if isinstance(exc, BadInput) else None
        return await page.render(
            "runs.html", status=status or _status_of(exc), error=message, **_empty(params)
        )
    counts = {status_name(c.status): c.count for c in counted.counts}
    next_token = base64.urlsafe_b64encode(reply.next_page_token).decode()
    return await page.render(
        "runs.html",
        runs=[_run_row(r) for r in reply.workflows],
        filters=filters,
        statuses=STATUSES,
        counts=[(s, counts.get(s, 0)) for s in STATUSES],
        next_page=next_token if reply.next_page_token else "",
        query_string=_without_page(params),
        batch_denied=page.denied("a batch action"),
        error=None,
    )


def _status_of(exc: BaseException) -> int:
    from durable_rpc.ui._web import _STATUS

    return next((s for t, s in _STATUS.items() if isinstance(exc, t)), 500)


def _empty(params: Any) -> dict[str, Any]:
    return {
        "runs": [],
        "filters": RunFilters(
            status=params.get("status", "") if params.get("status", "") in STATUS_VALUES else "",
            workflow_type=params.get("type", ""),
            started_after=params.get("after", ""),
            started_before=params.get("before", ""),
            query=params.get("q", ""),
        ),
        "statuses": STATUSES,
        "counts": [],
        "next_page": "",
        "query_string": "",
        "batch_denied": None,
    }


def _without_page(params: Any) -> str:
    from urllib.parse import urlencode

    return urlencode([(k, v) for k, v in params.multi_items() if k != "page" and v])


def _run_row(info: service_pb2.WorkflowInfo) -> dict[str, Any]:
    return {
        "workflow_id": info.workflow_id,
        "run_id": info.run_id,
        "type": info.workflow_type,
        "version": info.workflow_version,
        "task_queue": info.task_queue,
        "status": status_name(info.status),
        "start": _ms(info.start_time) if info.HasField("start_time") else None,
        "close": _ms(info.close_time) if info.HasField("close_time") else None,
        "events": info.history_length,
    }


def _ms(timestamp: Any) -> int:
    return _values.time_ms(timestamp)


async def run_page(page: Page) -> Response:
    workflow_id = page.request.path_params["workflow_id"]
    params = page.request.query_params
    client = await page.client()
    describe = await client.call(
        client.workflow_service.DescribeWorkflow,
        service_pb2.DescribeWorkflowRequest(
            namespace=page.namespace, workflow_id=workflow_id, run_id=params.get("run", "")
        ),
    )
    info = describe.info
    events = await client.get_handle(workflow_id, info.run_id).history()
    now_ms = int(time.time() * 1000)
    row = _run_row(info)
    start_ms, end_ms = _zoom(params, row["start"])
    first, last = _event_window(params, len(events))
    timeline = _timeline.build_timeline(events, now_ms=now_ms, pending=describe.pending_activities)
    svg = _timeline.render_timeline_svg(timeline, start_ms=start_ms, end_ms=end_ms, now_ms=now_ms)
    is_open = row["status"] == "running"
    failure = (
        _values.failure_view(describe.last_workflow_task_failure)
        if describe.HasField("last_workflow_task_failure")
        else None
    )
    return await page.render(
        "run.html",
        run=row,
        describe=describe,
        is_open=is_open,
        links=_links(events),
        input_text=_first_payload(events, "workflow_started", "input"),
        result=_result(events),
        pending=[_pending(p) for p in describe.pending_activities],
        task_failure=failure,
        timeline_svg=svg,
        zoom_from=params.get("from", ""),
        zoom_to=params.get("to", ""),
        events=_values.event_summaries(events, start=first - 1, stop=last),
        event_window=(first, last, len(events)),
        event_pages=_event_pages(run_path(page.namespace, workflow_id), params, first, len(events)),
        actions={name: page.denied(name) for name in ("signal", "cancel", "terminate", "redrive")},
    )


def _event_window(params: Any, total: int) -> tuple[int, int]:
    """The event ids shown, ``first`` to ``last`` (1-based, inclusive): ``EVENT_PAGE``
    from ``events_from``, or the latest page when it is not given (what an operator of
    an open run reads first). Past the end: the latest page."""
    text = params.get("events_from", "").strip()
    latest = max(1, total - EVENT_PAGE + 1)
    if not text:
        first = latest
    else:
        try:
            first = int(text)
        except ValueError:
            raise BadInput(f"events_from: {text[:40]!r} is not an event id") from None
        if first < 1:
            raise BadInput(f"events_from: {first} is not an event id (they start at 1)")
        if first > total:
            first = latest
    return first, min(total, first + EVENT_PAGE - 1)


def _event_pages(path: str, params: Any, first: int, total: int) -> list[tuple[str, str]]:
    """(label, link) to the first, earlier, later and latest pages of the event list,
    keeping the page's other parameters (run, zoom)."""
    kept = {k: v for k, v in params.items() if k != "events_from"}

    def link(start: int | None) -> str:
        query = {**kept, **({"events_from": str(start)} if start is not None else {})}
        return f"{path}?{urlencode(query)}" if query else path

    pages = []
    if first > 1:
        pages.append(("first", link(1)))
    if first - EVENT_PAGE > 1:
        pages.append(("earlier", link(first - EVENT_PAGE)))
    if first + EVENT_PAGE <= total:
        pages += [("later", link(first + EVENT_PAGE)), ("latest", link(None))]
    return pages


def _zoom(params: Any, start: int | None) -> tuple[int | None, int | None]:
    """The time range asked for, as seconds after the run's start (``from``/``to``)."""
    bounds: list[int | None] = []
    for name in ("from", "to"):
        text = params.get(name, "").strip()
        if not text or start is None:
            bounds.append(None)
            continue
        try:
            seconds = float(text)
        except ValueError:
            raise BadInput(f"zoom {name}: {text!r} is not a number of seconds") from None
        if not 0 <= seconds < 10**9:
            raise BadInput(f"zoom {name}: {text!r} is out of range")
        bounds.append(start + int(seconds * 1000))
    low, high = bounds
    if low is not None and high is not None and high <= low:
        raise BadInput("zoom: 'to' must come after 'from'")
    return low, high


def _links(events: list[history_pb2.HistoryEvent]) -> list[tuple[str, str, str]]:
    """(label, workflow id, run id) of the parent, children and continued runs."""
    links: list[tuple[str, str, str]] = []
    for event in events:
        kind = event.WhichOneof("attributes")
        if kind == "workflow_started":
            started = event.workflow_started
            if started.parent_run_id:
                links.append(("parent", started.parent_workflow_id, started.parent_run_id))
            if started.continued_from_run_id:
                links.append(("continued from", started.workflow_id, started.continued_from_run_id))
        elif kind == "child_workflow_started":
            child = event.child_workflow_started
            links.append((f"child (seq {child.seq})", child.workflow_id, child.run_id))
        elif kind == "workflow_continued_as_new":
            first = events[0].workflow_started
            links.append(
                ("continued as", first.workflow_id, event.workflow_continued_as_new.new_run_id)
            )
    return links


def _first_payload(events: list[history_pb2.HistoryEvent], kind: str, field: str) -> str | None:
    for event in events:
        if event.WhichOneof("attributes") == kind:
            attrs = getattr(event, kind)
            return _values.payload_text(getattr(attrs, field)) if attrs.HasField(field) else None
    return None


def _result(events: list[history_pb2.HistoryEvent]) -> tuple[str, str] | None:
    """(how the run closed, what it closed with) from its closing event."""
    for event in reversed(events):
        kind = event.WhichOneof("attributes")
        if kind == "workflow_completed":
            return "result", _values.payload_text(event.workflow_completed.result)
        if kind == "workflow_failed":
            return "failure", _values.failure_view(event.workflow_failed.failure).line
        if kind in ("workflow_cancelled", "workflow_terminated", "workflow_timed_out"):
            attrs = getattr(event, kind)
            reason = getattr(attrs, "reason", "")
            return kind.removeprefix("workflow_"), reason or "-"
    return None


def _pending(activity: service_pb2.PendingActivity) -> dict[str, Any]:
    return {
        "seq": activity.seq,
        "type": activity.activity_type,
        "state": activity.state,
        "attempt": activity.attempt,
        "worker": activity.worker_id,
        "session": activity.session_id,
        "last_failure": _values.failure_view(activity.last_failure)
        if activity.HasField("last_failure")
        else None,
        "next_attempt": _ms(activity.next_attempt_time)
        if activity.HasField("next_attempt_time")
        else None,
        "lease_expires": _ms(activity.lease_expire_time)
        if activity.HasField("lease_expire_time")
        else None,
        "heartbeat": _values.payload_text(activity.heartbeat_details)
        if activity.HasField("heartbeat_details")
        else None,
    }
