"""A workflow task's history in pages: the token a claim hands out and the next pages.

A claimed task carries its history's first byte-bounded page (the store's
``HistoryLimits.page_bytes``); when more follows, the PollWorkflowTaskResponse carries a
token naming the run, the last event sent and the claim's history length, and the worker
fetches the rest with GetWorkflowTaskHistory, page by page, up to that length (events
appended since belong to the next task). Each page is read alone from the store, so a
call never holds more than one page however long the history.
"""

from __future__ import annotations

import re

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.server import _convert
from durable_rpc.store import ClaimedWorkflowTask, HistoryLimits, Store
from durable_rpc.v1 import service_pb2

# Most events per page (the byte bound usually cuts first).
_PAGE_EVENTS = 10_000
# "<run id> <last event sent> <history length>"; run ids are UUIDs the store made.
_TOKEN = re.compile(rb"([0-9A-Za-z-]{1,64}) ([0-9]{1,18}) ([1-9][0-9]{0,17})")


def token(run_id: str, sent_through: int, history_length: int) -> bytes:
    """The token for the rest of a task's history ("" when nothing is left)."""
    if sent_through >= history_length:
        return b""
    return f"{run_id} {sent_through} {history_length}".encode()


def parse_token(raw: bytes) -> tuple[str, int, int]:
    match = _TOKEN.fullmatch(raw)
    if match is None or int(match[2]) >= int(match[3]):
        raise InvalidArgumentError("next_page_token is not one this server issued")
    return match[1].decode(), int(match[2]), int(match[3])


def workflow_task_message(
    task: ClaimedWorkflowTask, limits: HistoryLimits
) -> service_pb2.PollWorkflowTaskResponse:
    return service_pb2.PollWorkflowTaskResponse(
        task_id=task.task_id,
        fencing_token=task.fencing_token,
        lease_expires_at=_convert.timestamp(task.lease_expires_at_ms),
        workflow_id=task.workflow_id,
        run_id=task.run_id,
        workflow_type=task.workflow_type,
        workflow_version=task.workflow_version,
        history=_convert.history(task.events),
        workflow_time=_convert.timestamp(task.workflow_time_ms),
        attempt=task.attempt,
        pending_updates=[
            service_pb2.PendingUpdate(
                update_id=update.update_id,
                update_name=update.update_name,
                input=_convert.payload(update.input),
            )
            for update in task.pending_updates
        ],
        next_page_token=token(task.run_id, len(task.events), task.history_length),
        history_length=task.history_length,
        history_size_bytes=task.history_size_bytes,
        history_warn_events=limits.warn_events,
        history_warn_bytes=limits.warn_bytes,
    )


async def next_page(
    store: Store, namespace: str, raw_token: bytes
) -> service_pb2.GetWorkflowTaskHistoryResponse:
    run_id, after, through = parse_token(raw_token)
    page = await store.get_history(
        namespace, "", run_id, after, _PAGE_EVENTS, through_event_id=through
    )
    sent = after + len(page.events)
    return service_pb2.GetWorkflowTaskHistoryResponse(
        history=_convert.history(page.events),
        next_page_token=token(run_id, sent, through) if page.events else b"",
    )
