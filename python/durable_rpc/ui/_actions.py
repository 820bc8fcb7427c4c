"""Actions on runs: signal, cancel, terminate, redrive, and batch cancel/terminate.

Each is two POSTs: the first renders a confirmation page (nothing happens yet), the
second, carrying ``confirmed=yes``, acts. Both carry the session's CSRF token (checked in
``_web.page``) and both re-check the session's role here: a disabled button is a hint,
never the guard. The server enforces its own roles beneath that."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import quote

from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from durable_rpc import converter
from durable_rpc.client._batch import run_batch
from durable_rpc.errors import DurableRpcError
from durable_rpc.ui._web import BadInput, Page, run_path
from durable_rpc.v1 import schedule_service_pb2, service_pb2

RUN_ACTIONS = ("signal", "cancel", "terminate", "redrive")
BATCH_ACTIONS = ("cancel", "terminate", "signal")
#: Reasons and signal names are short texts.
TEXT_LIMIT = 1000


def _text(form: FormData, name: str, *, required: bool = False) -> str:
    value = form.get(name, "")
    text = value.strip() if isinstance(value, str) else ""
    if required and not text:
        raise BadInput(f"{name.replace('_', ' ')} is required")
    if len(text) > TEXT_LIMIT:
        raise BadInput(f"{name.replace('_', ' ')} is longer than {TEXT_LIMIT} characters")
    return text


def _signal_args(text: str) -> list[Any]:
    """The signal's input: a JSON value (an array is the argument list)."""
    if not text:
        return []
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"the signal input is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    return value if isinstance(value, list) else [value]


async def run_action(page: Page) -> Response:
    action = page.request.path_params["action"]
    workflow_id = page.request.path_params["workflow_id"]
    if action not in RUN_ACTIONS:
        raise BadInput(f"unknown action {action!r}")
    form = await page.request.form()
    run_id = _text(form, "run")
    here = run_path(page.namespace, workflow_id)
    back = here
    if run_id:
        back += f"?run={quote(run_id, safe='')}"
    denied = page.denied(action)
    if denied is not None:
        return await page.render("error.html", status=403, message=denied, back=back)
    fields = {
        "reason": _text(form, "reason"),
        "signal_name": _text(form, "signal_name", required=action == "signal"),
        "input": _text(form, "input") if action == "signal" else "",
    }
    args = _signal_args(fields["input"]) if action == "signal" else []
    if form.get("confirmed") != "yes":
        return await page.render(
            "confirm.html",
            action=action,
            target=f"run {run_id or '(latest)'} of workflow {workflow_id}",
            post_to=f"{here}/{action}",
            hidden={"run": run_id, **fields},
            back=back,
        )
    client = await page.client()
    handle = client.get_handle(workflow_id, run_id or None)
    try:
        if action == "signal":
            await handle.signal(fields["signal_name"], *args)
        elif action == "cancel":
            await handle.cancel(fields["reason"])
        elif action == "terminate":
            await handle.terminate(fields["reason"])
        else:
            redriven = await handle.redrive(request_id=_text(form, "request_id") or None)
            back = f"{here}?run={quote(redriven.handle.run_id or '', safe='')}"
    except DurableRpcError as exc:
        return await page.error(exc)
    return RedirectResponse(back, status_code=303)


async def batch_action(page: Page) -> Response:
    form = await page.request.form()
    action = _text(form, "action", required=True)
    if action not in BATCH_ACTIONS:
        raise BadInput(f"a batch action is one of {', '.join(BATCH_ACTIONS)}, not {action!r}")
    back = f"/n/{quote(page.namespace, safe='')}/runs"
    denied = page.denied("a batch action")
    if denied is not None:
        return await page.render("error.html", status=403, message=denied, back=back)
    query = _text(form, "query", required=True)
    reason = _text(form, "reason")
    signal_name = _text(form, "signal_name", required=action == "signal")
    signal_input = _text(form, "input") if action == "signal" else ""
    args = _signal_args(signal_input)  # bad JSON is refused before the confirmation
    client = await page.client()
    if form.get("confirmed") != "yes":
        # How many open runs match now, exactly: what the operator confirms (the query is
        # checked by the server here, so a malformed one is refused before any
        # confirmation).
        counted = await client.call(
            client.workflow_service.CountWorkflows,
            service_pb2.CountWorkflowsRequest(
                namespace=page.namespace,
                query=query,
                status=service_pb2.WORKFLOW_STATUS_RUNNING,
            ),
        )
        count = str(counted.total)
        return await page.render(
            "confirm.html",
            action=f"batch {action}" + (f" {signal_name!r}" if action == "signal" else ""),
            target=f"{count} open run(s) matching {query}",
            post_to=page.request.url.path,
            hidden={
                "action": action,
                "query": query,
                "reason": reason,
                "signal_name": signal_name,
                "input": signal_input,
                "batch_id": str(uuid.uuid4()),
            },
            back=back,
        )
    request = service_pb2.BatchWorkflowsRequest(
        namespace=page.namespace,
        query=query,
        # The batch id came with the confirmation: a repeated POST repeats the same batch.
        batch_id=_text(form, "batch_id") or str(uuid.uuid4()),
    )
    if action == "cancel":
        request.cancel_reason = reason
    elif action == "signal":
        # Each run gets it once per batch id: the confirmed page's id, so a repeated POST
        # does not signal again.
        request.signal.signal_name = signal_name
        request.signal.input.data = converter.encode_args(args)
    else:
        request.terminate_reason = reason
    progress = await run_batch(client, request, None)
    return await page.render(
        "batch_done.html", action=action, query=query, progress=progress, back=back
    )


async def schedule_pause(page: Page) -> Response:
    schedule_id = page.request.path_params["schedule_id"]
    form = await page.request.form()
    paused = form.get("paused") == "yes"
    back = f"/n/{quote(page.namespace, safe='')}/schedules"
    denied = page.denied("pausing a schedule" if paused else "unpausing a schedule")
    if denied is not None:
        return await page.render("error.html", status=403, message=denied, back=back)
    client = await page.client()
    await client.call(
        client.schedule_service.PauseSchedule,
        schedule_service_pb2.PauseScheduleRequest(
            namespace=page.namespace,
            schedule_id=schedule_id,
            paused=paused,
            note=_text(form, "note") or ("paused from the web UI" if paused else ""),
        ),
    )
    return RedirectResponse(back, status_code=303)
