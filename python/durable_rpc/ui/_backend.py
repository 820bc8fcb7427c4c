"""The UI's connection to the server: one per session, shared by its namespaces, and what
a key may do. The UI is an ordinary gRPC client; the server decides every call by itself."""

from __future__ import annotations

from dataclasses import dataclass

from durable_rpc.client import Client, TLSConfig
from durable_rpc.errors import DurableRpcError, PermissionDeniedError, UnauthenticatedError
from durable_rpc.ui._sessions import Caller, Session
from durable_rpc.v1 import admin_service_pb2, service_pb2

#: How long a page waits for an unreachable server before saying so.
CONNECT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Backend:
    """Where the server is and how to reach it (the CLI's connection options)."""

    address: str
    tls: TLSConfig | None = None

    async def connect(self, api_key: str | None, namespace: str = "default") -> Client:
        # An empty key, not None: Client.connect would fall back to DURABLE_RPC_API_KEY,
        # and a visitor must never act with the UI process's own key by accident.
        return await Client.connect(
            self.address,
            namespace=namespace,
            api_key=api_key or "",
            tls=self.tls,
            timeout=CONNECT_TIMEOUT_S,
        )

    async def identify(self, api_key: str | None) -> tuple[bool, Caller, Client]:
        """(the server requires a key, who ``api_key`` is, a connection with that key);
        raises UnauthenticatedError for a key the server refuses."""
        client = await self.connect(api_key)
        try:
            info = await client.call(
                client.worker_service.GetServerInfo, service_pb2.GetServerInfoRequest()
            )
        except BaseException:
            await client.close()
            raise
        if not info.HasField("caller"):
            return info.auth_required, Caller(role=None, namespace=None), client
        c = info.caller
        caller = Caller(role=c.role, namespace=c.namespace or None, key_id=c.key_id, name=c.name)
        return info.auth_required, caller, client

    async def client(self, session: Session, namespace: str) -> Client:
        """A client of ``namespace`` on the session's one connection. A namespace the key
        cannot see is refused here, before anything is opened for it."""
        if not session.caller.may_see(namespace):
            raise PermissionDeniedError(
                f"the key is for namespace {session.caller.namespace}, not {namespace}"
            )
        async with session.lock:
            if session.closed:  # signed out (or evicted) while this request ran
                raise UnauthenticatedError("the session has ended: sign in again")
            if session.connection is None:
                session.connection = await self.connect(session.api_key)
            connection = session.connection
        if connection.namespace == namespace:
            return connection
        return connection.for_namespace(namespace)

    async def namespaces(self, session: Session) -> list[str]:
        """The namespaces the session's key can see (the server filters the list)."""
        if session.caller.namespace is not None:
            return [session.caller.namespace]
        client = await self.client(session, "default")
        reply = await client.call(
            client.admin_service.ListNamespaces, admin_service_pb2.ListNamespacesRequest()
        )
        return [n.name for n in reply.namespaces]


def denied_reason(caller: Caller, action: str) -> str | None:
    """Why the session may not do ``action`` in the UI (None: it may).

    The UI is an operator console: its actions (and the fleet pages, which the server
    opens to admins only) need the admin role; a client key reads. This is checked again
    on every POST, and the server still enforces its own roles beneath it."""
    if caller.is_admin:
        return None
    return f"{action} needs the admin role; your key is a {caller.role} key"


def error_text(exc: BaseException) -> str:
    """What a page says about a failed call: the server's stable reason and message
    (never a stack trace, a server path or the key)."""
    if isinstance(exc, DurableRpcError):
        return str(exc)
    return "the UI could not complete this request (see the UI process's log)"
