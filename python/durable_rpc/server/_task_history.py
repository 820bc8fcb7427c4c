"""A workflow task's history in pages: the token a claim hands out and the next pages.

A claimed task carries its history's first byte-bounded page (the store's
``HistoryLimits.page_bytes``); when more follows, the PollWorkflowTaskResponse carries a
token for the rest, and the worker fetches it with GetWorkflowTaskHistory, page by page,
up to the claim's history length (events appended since belong to the next task). Each
page is read alone from the store, so a call never holds more than one page however
long the history.

The token is the claim's own: it names the namespace, run, task, worker, fencing token
and calling key, signed with HMAC-SHA256 under a secret every replica reads from the
store. A page is served only to the key the claim was handed to, and only while that
claim's lease still holds, so a token can be neither written nor reused by another
caller, nor after the task moved on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import astuple, dataclass, replace

from durable_rpc.errors import InvalidArgumentError, LeaseLostError, PermissionDeniedError
from durable_rpc.server import _convert
from durable_rpc.server._auth import current_principal
from durable_rpc.store import ClaimedWorkflowTask, HistoryLimits, LeaseRef, Store
from durable_rpc.v1 import service_pb2

# Most events per page (the byte bound usually cuts first).
_PAGE_EVENTS = 10_000
#: The name of the store's signing secret for these tokens.
SECRET_NAME = "workflow-task-history-pages"
_MAC_BYTES = hashlib.sha256().digest_size
_FOREIGN = "next_page_token is not one this server issued"


@dataclass(frozen=True, slots=True)
class _PageCursor:
    namespace: str
    run_id: str
    task_id: int
    worker_id: str
    fencing_token: int
    key_id: str
    sent_through: int
    history_length: int


def _caller_key_id() -> str:
    """The calling key's id ("" with authentication off)."""
    principal = current_principal.get()
    return "" if principal is None else principal.key_id


class TaskHistoryPages:
    """Issues and serves the page tokens of claimed workflow tasks."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._secret: bytes | None = None

    async def _key(self) -> bytes:
        if self._secret is None:
            self._secret = await self._store.signing_secret(SECRET_NAME)
        return self._secret

    def _mac(self, key: bytes, body: bytes) -> bytes:
        return hmac.new(key, body, hashlib.sha256).digest()

    async def _token(self, cursor: _PageCursor) -> bytes:
        """The token for the rest of a task's history ("" when nothing is left)."""
        if cursor.sent_through >= cursor.history_length:
            return b""
        body = json.dumps(astuple(cursor), separators=(",", ":")).encode()
        return self._mac(await self._key(), body) + body

    async def _cursor(self, raw: bytes) -> _PageCursor:
        mac, body = raw[:_MAC_BYTES], raw[_MAC_BYTES:]
        if not body or not hmac.compare_digest(mac, self._mac(await self._key(), body)):
            raise InvalidArgumentError(_FOREIGN)
        return _PageCursor(*json.loads(body))

    async def workflow_task_message(
        self, namespace: str, task: ClaimedWorkflowTask, limits: HistoryLimits
    ) -> service_pb2.PollWorkflowTaskResponse:
        cursor = _PageCursor(
            namespace,
            task.run_id,
            task.task_id,
            task.worker_id,
            task.fencing_token,
            _caller_key_id(),
            len(task.events),
            task.history_length,
        )
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
            next_page_token=await self._token(cursor),
            history_length=task.history_length,
            history_size_bytes=task.history_size_bytes,
            history_warn_events=limits.warn_events,
            history_warn_bytes=limits.warn_bytes,
        )

    async def next_page(
        self, namespace: str, raw_token: bytes
    ) -> service_pb2.GetWorkflowTaskHistoryResponse:
        cursor = await self._cursor(raw_token)
        if cursor.namespace != namespace:
            raise InvalidArgumentError(_FOREIGN)
        if cursor.key_id != _caller_key_id():
            raise PermissionDeniedError("next_page_token was issued to another key")
        lease = LeaseRef(cursor.task_id, cursor.worker_id, cursor.fencing_token)
        if not await self._store.lease_holds(namespace, lease):
            raise LeaseLostError(
                f"workflow task {cursor.task_id} is no longer leased under this token: "
                "its history pages are not served"
            )
        page = await self._store.get_history(
            namespace,
            "",
            cursor.run_id,
            cursor.sent_through,
            _PAGE_EVENTS,
            through_event_id=cursor.history_length,
        )
        following = cursor.sent_through + len(page.events)
        token = b""
        if page.events:
            token = await self._token(replace(cursor, sent_through=following))
        return service_pb2.GetWorkflowTaskHistoryResponse(
            history=_convert.history(page.events), next_page_token=token
        )
