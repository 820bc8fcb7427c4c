"""A worker's side of worker sessions: registering its capabilities, the sessions it
holds (learnt from its claims and its explicit handles) and closing them on graceful
shutdown (``durable_rpc.sessions``; the server's side is store/_sessions.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import grpc.aio

from durable_rpc.errors import (
    DurableRpcError,
    SessionClosedError,
    SessionLostError,
    SessionNotFoundError,
)
from durable_rpc.sessions import SessionOptions, WorkerSession, capability_map
from durable_rpc.v1 import session_service_pb2 as pb
from durable_rpc.v1 import session_service_pb2_grpc
from durable_rpc.worker._client import call
from durable_rpc.worker._server_link import ServerLink

log = logging.getLogger("durable_rpc.worker")

#: The close reason of a worker's graceful shutdown.
WORKER_SHUTDOWN = "worker_shutdown"
#: What a close that found the session already gone (taken over, closed) answers.
_GONE = (SessionLostError, SessionClosedError, SessionNotFoundError)


class WorkerSessions:
    """The sessions one worker holds, by id (the generation it holds)."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        link: ServerLink,
        *,
        namespace: str,
        worker_id: str,
        task_queue: str,
        capabilities: Mapping[str, str],
        max_sessions: int,
    ) -> None:
        self.stub = session_service_pb2_grpc.WorkerSessionServiceStub(channel)
        self.link = link
        self.namespace = namespace
        self.worker_id = worker_id
        self.task_queue = task_queue
        self.capabilities = dict(capabilities)
        self.max_sessions = max_sessions
        self.held: dict[str, int] = {}
        # The latest report of each session this worker held: what its running attempts
        # read (activity.session()) and are cut off by (the lease keeper).
        self.views: dict[str, WorkerSession] = {}

    async def register(self) -> None:
        await call(
            self.stub.RegisterWorkerSessions,
            pb.RegisterWorkerSessionsRequest(
                namespace=self.namespace,
                worker_id=self.worker_id,
                capabilities=self.capabilities,
                max_concurrent_worker_sessions=self.max_sessions,
            ),
            self.link,
        )

    def note(self, session: pb.WorkerSession) -> WorkerSession:
        """A claim or a handle's call reported ``session``: remember what this worker
        holds (a closed one is no longer held)."""
        if session.state == "closed":
            self.held.pop(session.session_id, None)
        else:
            self.held[session.session_id] = session.generation
        view = WorkerSession.from_proto(session)
        if view.holder_worker_id == self.worker_id:
            self.views[view.session_id] = view
            if len(self.views) > 2 * self.max_sessions + 8:
                self._forget_ended()
        return view

    def _forget_ended(self) -> None:
        # A view past its TTL stops nothing more than the claim's own copy does.
        now = datetime.now(UTC)
        for session_id, view in list(self.views.items()):
            if view.ttl_expires_at is not None and view.ttl_expires_at <= now:
                del self.views[session_id]

    def view(self, session_id: str) -> WorkerSession | None:
        return self.views.get(session_id)

    async def close(self, session_id: str, generation: int, reason: str) -> WorkerSession:
        response = await call(
            self.stub.CloseWorkerSession,
            pb.CloseWorkerSessionRequest(
                namespace=self.namespace,
                worker_id=self.worker_id,
                session_id=session_id,
                generation=generation,
                reason=reason,
            ),
            self.link,
        )
        return self.note(response.session)

    async def close_all(self, reason: str = WORKER_SHUTDOWN) -> None:
        """Graceful shutdown: close every session this worker still holds (after its
        activities drained). One another worker took over is left to it."""
        for session_id, generation in list(self.held.items()):
            try:
                await self.close(session_id, generation, reason)
            except _GONE:
                pass
            except DurableRpcError as error:
                log.warning("closing worker session %s failed: %s", session_id, error)
            self.held.pop(session_id, None)


class WorkerSessionHandle:
    """An explicit session held by this worker: ``create()`` it before any activity
    names it (keeping an idle resource), ``renew()`` its lease while idle, ``close()``
    it when done. Its activities are scheduled with ``SessionOptions(session_id=...)``
    naming the same id."""

    def __init__(self, sessions: WorkerSessions, options: SessionOptions) -> None:
        if options.session_id is None:
            raise ValueError("an explicit worker session needs a session_id")
        self._sessions = sessions
        self.options = options
        self.session: WorkerSession | None = None

    @property
    def session_id(self) -> str:
        assert self.options.session_id is not None
        return self.options.session_id

    async def create(self) -> WorkerSession:
        s = self._sessions
        response = await call(
            s.stub.CreateWorkerSession,
            pb.CreateWorkerSessionRequest(
                namespace=s.namespace,
                worker_id=s.worker_id,
                task_queue=s.task_queue,
                options=self.options.to_proto(),
            ),
            s.link,
        )
        self.session = s.note(response.session)
        return self.session

    def _generation(self) -> int:
        if self.session is None:
            raise RuntimeError("create() the session first")
        return self.session.generation

    async def renew(self) -> WorkerSession:
        """Extends the holder's lease (never the TTL). SessionLostError when another
        worker took it over; SessionClosedError once it closed."""
        s = self._sessions
        response = await call(
            s.stub.RenewWorkerSession,
            pb.RenewWorkerSessionRequest(
                namespace=s.namespace,
                worker_id=s.worker_id,
                session_id=self.session_id,
                generation=self._generation(),
            ),
            s.link,
        )
        self.session = s.note(response.session)
        return self.session

    async def close(self, reason: str = "closed") -> WorkerSession:
        """Closes it; its queued activities fail with SessionClosed naming ``reason``."""
        self.session = await self._sessions.close(self.session_id, self._generation(), reason)
        return self.session

    async def describe(self) -> WorkerSession:
        s = self._sessions
        response = await call(
            s.stub.DescribeWorkerSession,
            pb.DescribeWorkerSessionRequest(namespace=s.namespace, session_id=self.session_id),
            s.link,
        )
        return WorkerSession.from_proto(response.session)


def worker_sessions_of(
    client: object,
    link: ServerLink,
    *,
    task_queue: str,
    worker_id: str,
    capabilities: Mapping[str, str] | Sequence[str] | None,
    max_sessions: int,
) -> WorkerSessions:
    """The session registry of a Worker built with ``worker_sessions=True`` (validated
    here, before any server contact)."""
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ValueError(f"max_concurrent_worker_sessions must be >= 1, got {max_sessions!r}")
    channel = getattr(client, "channel", None)
    if channel is None:
        raise TypeError("worker sessions need a Client (its channel)")
    return WorkerSessions(
        channel,
        link,
        namespace=str(getattr(client, "namespace", "default")),
        worker_id=worker_id,
        task_queue=task_queue,
        capabilities=capability_map(capabilities),
        max_sessions=max_sessions,
    )
