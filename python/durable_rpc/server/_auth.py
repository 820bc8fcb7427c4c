"""Authentication and authorization of every call (docs/security.md).

With authentication on, a call carries ``authorization: Bearer <secret>`` metadata. The
key is looked up by its public id, its hash compared in constant time, and its state
judged by the database clock on every call, so a revocation or an expiry holds from the
next call on every replica. Then the RPC's rule (:data:`RULES`) says which access the
call needs in which namespace, and ``auth.authorize`` decides. A refused call never
reaches its handler, so it changes nothing; one without a valid key is refused before
its request is even received (:class:`AuthenticationInterceptor`).

A worker's leases are bound to the key that claimed them: with authentication on, the
worker id a WorkerService call names is qualified by its key id (``<key id>:<worker id>``)
before the handler sees it, so the fenced writes' owner check refuses another key's
heartbeat or report with LEASE_LOST even when it names the right task, worker and token.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from durable_rpc._rpc_status import to_status
from durable_rpc.auth import Access, Principal, Role, authorize, key_id_of, secret_matches
from durable_rpc.errors import DurableRpcError, PermissionDeniedError, UnauthenticatedError
from durable_rpc.server import _validate
from durable_rpc.store import Store

#: The principal of the call being handled (None: authentication is off).
current_principal: contextvars.ContextVar[Principal | None] = contextvars.ContextVar(
    "durable_rpc_principal", default=None
)

_WORKFLOW = "/durable_rpc.v1.WorkflowService/"
_WORKER = "/durable_rpc.v1.WorkerService/"
_ADMIN = "/durable_rpc.v1.AdminService/"
_SCHEDULE = "/durable_rpc.v1.ScheduleService/"
_PAYLOAD = "/durable_rpc.v1.PayloadService/"
_SESSIONS = "/durable_rpc.v1.WorkerSessionService/"

Rule = Callable[[Any], tuple[Access, str | None]]


def _in_namespace(access: Access) -> Rule:
    return lambda request: (access, _validate.namespace(request.namespace))


def key_access(namespace: str | None) -> tuple[Access, str | None]:
    """Keys for every namespace (None) are a cluster admin's to manage; a namespace's keys
    are its admins'."""
    if namespace is None:
        return Access.CLUSTER_ADMIN, None
    return Access.NAMESPACE_ADMIN, namespace


def _key_scope(request: Any) -> tuple[Access, str | None]:
    return key_access(None if request.every_namespace else _validate.namespace(request.namespace))


def _revoke_scope(request: Any) -> tuple[Access, str | None]:
    """A key revoked by its id alone (no namespace, not every_namespace) needs an admin
    key here; the handler then checks the key's own namespace (:func:`key_access`)."""
    if not request.every_namespace and not request.namespace:
        return Access.NAMESPACE_ADMIN, None
    return _key_scope(request)


_ADMIN_RULES: dict[str, Rule] = {
    "CreateNamespace": lambda _: (Access.CLUSTER_ADMIN, None),
    "DescribeNamespace": _in_namespace(Access.NAMESPACE_ADMIN),
    "UpdateNamespace": _in_namespace(Access.NAMESPACE_ADMIN),
    # Any key lists the namespaces it can see (the handler filters).
    "ListNamespaces": lambda _: (Access.ANY_KEY, None),
    "CreateApiKey": _key_scope,
    "ListApiKeys": _key_scope,
    "RevokeApiKey": _revoke_scope,
    "ListWorkers": _in_namespace(Access.NAMESPACE_ADMIN),
    "DescribeTaskQueue": _in_namespace(Access.NAMESPACE_ADMIN),
    "ListTaskQueues": _in_namespace(Access.NAMESPACE_ADMIN),
    "SetTaskQueueLimit": _in_namespace(Access.NAMESPACE_ADMIN),
    "ListTaskQueueLimits": _in_namespace(Access.NAMESPACE_ADMIN),
    "SetRateLimit": _in_namespace(Access.NAMESPACE_ADMIN),
    "ListRateLimits": _in_namespace(Access.NAMESPACE_ADMIN),
    "RemoveRateLimit": _in_namespace(Access.NAMESPACE_ADMIN),
    "SetBudget": _in_namespace(Access.NAMESPACE_ADMIN),
    "ListBudgets": _in_namespace(Access.NAMESPACE_ADMIN),
    "RemoveBudget": _in_namespace(Access.NAMESPACE_ADMIN),
    "SetNamespaceAdmission": _in_namespace(Access.NAMESPACE_ADMIN),
    "GetNamespaceAdmission": _in_namespace(Access.NAMESPACE_ADMIN),
    "RemoveNamespaceAdmission": _in_namespace(Access.NAMESPACE_ADMIN),
    "ListDefinitions": _in_namespace(Access.NAMESPACE_ADMIN),
    "RemoveDefinition": _in_namespace(Access.NAMESPACE_ADMIN),
    "RestoreDefinition": _in_namespace(Access.NAMESPACE_ADMIN),
}


def _batch_namespace(request: Any) -> tuple[Access, str | None]:
    """CompleteTasks: every item must be in one namespace the key may work in (a batch
    spanning namespaces is refused, whoever sends it)."""
    namespaces = {
        _validate.namespace(getattr(item, item.WhichOneof("outcome")).namespace)
        for item in request.outcomes
        if item.WhichOneof("outcome") is not None
    }
    if len(namespaces) > 1:
        raise PermissionDeniedError("a CompleteTasks batch must stay within one namespace")
    return Access.WORKER, next(iter(namespaces), None)


def rule_for(method: str) -> Rule | None:
    """The rule of a unary RPC (None: nobody may call it)."""
    if method == f"{_WORKER}CompleteTasks":
        return _batch_namespace
    if method == f"{_WORKER}GetServerInfo":  # names no namespace and changes nothing
        return lambda _: (Access.ANY_KEY, None)
    if method.startswith((_WORKFLOW, _SCHEDULE)):
        return _in_namespace(Access.CLIENT)
    if method.startswith(_WORKER):
        return _in_namespace(Access.WORKER)
    if method.startswith(_PAYLOAD):
        return _in_namespace(Access.PAYLOADS)
    if method in (f"{_SESSIONS}DescribeWorkerSession", f"{_SESSIONS}ListWorkerSessions"):
        # Reads: a client (an operator's CLI) may look too.
        return _in_namespace(Access.PAYLOADS)
    if method.startswith(_SESSIONS):
        return _in_namespace(Access.WORKER)
    if method.startswith(_ADMIN):
        return _ADMIN_RULES.get(method.removeprefix(_ADMIN))
    return None


def is_open(method: str) -> bool:
    """Calls that need no key: health, which load balancers ask without one."""
    return method.startswith("/grpc.health.v1.Health/")


class AuthenticationInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Settles who calls from the call's metadata alone, before grpc receives the request
    message: a call without a valid key is refused with its body never read, so callers
    without a key cannot make the server hold their requests (each up to the request
    limit) in memory. It is the outermost interceptor because it must run on every call:
    the ones inside it hand out the handlers they wrapped without asking further.

    The principal goes to the handler's admission (``ErrorInterceptor``) in
    :data:`current_principal`; the rules of the RPC are applied there, on the parsed
    request."""

    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if not is_open(details.method):
            try:
                principal = await self._authenticator.principal(details.invocation_metadata)
            except UnauthenticatedError as exc:
                return _refusal(exc)
            except Exception:
                # Not a verdict on the key (the store is unavailable, say): the handler's
                # admission authenticates the call again and answers it through the one
                # error table.
                principal = None
            current_principal.set(principal)
        return await continuation(details)


def _refusal(error: UnauthenticatedError) -> grpc.RpcMethodHandler:
    """A handler that answers ``error`` without reading the request: as a request stream
    it is never asked for a message (a unary handler would be given the whole body)."""
    status = to_status(error)

    async def refuse(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        await context.abort_with_status(status)

    return grpc.stream_unary_rpc_method_handler(refuse)


async def caller(authenticator: Authenticator, context: grpc.aio.ServicerContext) -> Principal:
    """The principal of this call: the one :class:`AuthenticationInterceptor` settled,
    else (no verdict there) the one the call's metadata names."""
    principal = current_principal.get()
    if principal is not None:
        return principal
    return await authenticator.principal(context.invocation_metadata())


def guard_stream(handler: grpc.RpcMethodHandler, authenticator: Authenticator) -> Any:
    """``handler`` (a stream-stream RPC: server reflection) behind "any valid key"."""
    inner = handler.stream_stream

    async def guarded(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        try:
            principal = await caller(authenticator, context)
            authorize(principal, Access.ANY_KEY, None)
        except DurableRpcError as exc:
            await context.abort_with_status(to_status(exc))
        async for response in inner(requests, context):
            yield response

    return grpc.stream_stream_rpc_method_handler(
        guarded,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


#: What the secret naming an unknown key id is compared with: as long as a stored hash,
#: so the check costs what a wrong secret's does, and the SHA-256 of no secret anyone has.
_NO_SECRET_HASH = "0" * 64


class Authenticator:
    """Turns a call's metadata into the principal its key stands for."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def principal(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> Principal:
        secret = _bearer(metadata)
        key_id = key_id_of(secret)
        if key_id is None:
            raise UnauthenticatedError("the API key is malformed")
        # The stores cache keys, and ids with no key, and forget them when keys change
        # (SQLite and PostgreSQL lookup_api_key): a cached answer does not suspend this call.
        found = await self._store.lookup_api_key(key_id)
        # One answer, after the same work, for an unknown key and a wrong secret: the
        # caller learns nothing of which key ids exist, not even from the time it took.
        matches = secret_matches(secret, found.secret_hash if found else _NO_SECRET_HASH)
        if found is None or not matches:
            raise UnauthenticatedError("the API key is not valid")
        key = found.key
        if key.revoked_at_ms is not None:
            raise UnauthenticatedError(f"the API key {key.key_id} was revoked")
        if key.expires_at_ms is not None and key.expires_at_ms <= found.now_ms:
            raise UnauthenticatedError(f"the API key {key.key_id} has expired")
        return Principal(key.key_id, key.name, Role(key.role), key.namespace)


def _bearer(metadata: Sequence[tuple[str, str | bytes]] | None) -> str:
    for name, value in metadata or ():
        if name != "authorization":
            continue
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        scheme, _, secret = text.strip().partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            raise UnauthenticatedError("authorization metadata must be 'Bearer <API key>'")
        return secret.strip()
    raise UnauthenticatedError(
        "this server requires an API key: send 'authorization: Bearer <API key>' metadata"
    )


def authorize_request(principal: Principal, method: str, request: Any) -> None:
    """Refuse the call unless ``principal`` may make it; then bind worker ids to the key."""
    rule = rule_for(method)
    if rule is None:
        authorize(principal, None, None)
        return
    access, namespace = rule(request)
    authorize(principal, access, namespace)
    if method.startswith((_WORKER, _SESSIONS)):
        # A session's holder is the claiming worker's bound id: its calls name the same.
        _bind_worker_ids(request, principal)


def _bind_worker_ids(request: Message, principal: Principal) -> None:
    """Qualify the worker ids a WorkerService request names with the caller's key id:
    its own ``worker_id``, its ``lease``'s, and each CompleteTasks item's lease.
    (tests/security/test_matrix.py checks these are all the worker ids those requests
    can hold.)"""
    fields = request.DESCRIPTOR.fields_by_name
    if "worker_id" in fields and request.worker_id:  # type: ignore[attr-defined]
        request.worker_id = bound_worker_id(principal, request.worker_id)  # type: ignore[attr-defined]
    if "lease" in fields:
        lease = request.lease  # type: ignore[attr-defined]
        if lease.worker_id:
            lease.worker_id = bound_worker_id(principal, lease.worker_id)
    if "outcomes" in fields:
        for item in request.outcomes:  # type: ignore[attr-defined]
            kind = item.WhichOneof("outcome")
            if kind is not None:
                _bind_worker_ids(getattr(item, kind), principal)


def bound_worker_id(principal: Principal, worker_id: str) -> str:
    return f"{principal.key_id}:{worker_id}"
