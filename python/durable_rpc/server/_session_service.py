"""WorkerSessionService: a worker's registration of worker sessions and the explicit
session handle's create, renew, close and describe (``store/_ops_sessions.py``; the
contract in proto/durable_rpc/v1/session_service.proto and docs/engine.md, "Worker
sessions"). Worker calls, DescribeWorkerSession also a client's (``_auth``)."""

from __future__ import annotations

import grpc

from durable_rpc.errors import InvalidArgumentError
from durable_rpc.server import _convert, _validate
from durable_rpc.store import Store
from durable_rpc.store._session_records import WorkerSessionRecord
from durable_rpc.v1 import options_pb2, session_service_pb2_grpc
from durable_rpc.v1 import session_service_pb2 as pb


def session_message(record: WorkerSessionRecord) -> pb.WorkerSession:
    """The wire form of a session record (also a claimed activity task's ``session``)."""
    return pb.WorkerSession(
        session_id=record.session_id,
        task_queue=record.task_queue,
        state=record.state,
        holder_worker_id=record.holder_worker_id or "",
        generation=record.generation,
        lease_expires_at=_convert.timestamp(record.lease_expires_at_ms),
        ttl_expires_at=_convert.timestamp(record.ttl_expires_at_ms),
        options=options_pb2.SessionOptions.FromString(record.options),
        close_reason=record.close_reason or "",
        created_at=_convert.timestamp(record.created_at_ms),
        reacquisitions=record.reacquisitions,
    )


#: ListWorkerSessions' page size when none is asked for, and the most it returns.
DEFAULT_PAGE = 100
MAX_PAGE = 1000


def _answer(record: WorkerSessionRecord) -> pb.WorkerSessionResponse:
    return pb.WorkerSessionResponse(session=session_message(record))


class WorkerSessionService(session_service_pb2_grpc.WorkerSessionServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

    async def RegisterWorkerSessions(
        self, request: pb.RegisterWorkerSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.RegisterWorkerSessionsResponse:
        await self._store.register_worker_sessions(
            _validate.namespace(request.namespace),
            request.worker_id,
            dict(request.capabilities),
            request.max_concurrent_worker_sessions,
        )
        return pb.RegisterWorkerSessionsResponse()

    async def CreateWorkerSession(
        self, request: pb.CreateWorkerSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.WorkerSessionResponse:
        return _answer(
            await self._store.create_worker_session(
                _validate.namespace(request.namespace),
                request.worker_id,
                _validate.name("task_queue", request.task_queue),
                request.options.SerializeToString(),
            )
        )

    async def RenewWorkerSession(
        self, request: pb.RenewWorkerSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.WorkerSessionResponse:
        return _answer(
            await self._store.renew_worker_session(
                _validate.namespace(request.namespace),
                request.worker_id,
                request.session_id,
                request.generation,
            )
        )

    async def CloseWorkerSession(
        self, request: pb.CloseWorkerSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.WorkerSessionResponse:
        return _answer(
            await self._store.close_worker_session(
                _validate.namespace(request.namespace),
                request.worker_id,
                request.session_id,
                request.generation,
                request.reason[:200],
            )
        )

    async def DescribeWorkerSession(
        self, request: pb.DescribeWorkerSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.WorkerSessionResponse:
        return _answer(
            await self._store.describe_worker_session(
                _validate.namespace(request.namespace), request.session_id
            )
        )

    async def ListWorkerSessions(
        self, request: pb.ListWorkerSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListWorkerSessionsResponse:
        size = request.page_size or DEFAULT_PAGE
        if not 1 <= size <= MAX_PAGE:
            raise InvalidArgumentError(f"page_size must be in 1..{MAX_PAGE}")
        # One more than asked for tells whether another page follows.
        records = await self._store.list_worker_sessions(
            _validate.namespace(request.namespace),
            _validate.name("task_queue", request.task_queue),
            size + 1,
            request.page_token,
        )
        page = records[:size]
        return pb.ListWorkerSessionsResponse(
            sessions=[session_message(r) for r in page],
            next_page_token=page[-1].session_id if len(records) > size else "",
        )
