"""AdminService: namespaces and API keys, for operators (proto/.../admin_service.proto).

Every change is logged with the acting key's id and name (never a secret; a secret made
here is returned once and never logged).
"""

from __future__ import annotations

import logging

import grpc
from google.protobuf import duration_pb2

from durable_rpc.auth import Principal, authorize, new_key
from durable_rpc.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from durable_rpc.server import _convert, _validate
from durable_rpc.server._admin_admission import AdminAdmissionMixin
from durable_rpc.server._admin_budgets import AdminBudgetsMixin
from durable_rpc.server._admin_definitions import AdminDefinitionsMixin
from durable_rpc.server._admin_fleet import AdminFleetMixin
from durable_rpc.server._admin_limits import AdminLimitsMixin, AdminRateLimitsMixin
from durable_rpc.server._auth import current_principal, key_access
from durable_rpc.store import ApiKeyRecord, NamespaceRecord, Store
from durable_rpc.v1 import admin_service_pb2 as pb
from durable_rpc.v1 import admin_service_pb2_grpc

log = logging.getLogger("durable_rpc.server.admin")


def actor() -> str:
    """Who acts, for the audit log: the key's id and name, or 'unauthenticated'."""
    principal = current_principal.get()
    return principal.describe() if principal is not None else "unauthenticated caller"


def namespace_message(record: NamespaceRecord) -> pb.Namespace:
    retention = duration_pb2.Duration()
    retention.FromMilliseconds(record.retention_ms)
    return pb.Namespace(
        name=record.name,
        description=record.description,
        retention=retention,
        create_time=_convert.timestamp(record.created_at_ms),
        payload_quota_bytes=record.payload_quota_bytes,
        payload_stored_bytes=record.payload_stored_bytes,
    )


def key_message(record: ApiKeyRecord) -> pb.ApiKey:
    return pb.ApiKey(
        key_id=record.key_id,
        name=record.name,
        role=record.role,
        namespace=record.namespace or "",
        create_time=_convert.timestamp(record.created_at_ms),
        expire_time=_convert.timestamp(record.expires_at_ms),
        revoke_time=_convert.timestamp(record.revoked_at_ms),
    )


def _retention_ms(request: pb.CreateNamespaceRequest | pb.UpdateNamespaceRequest) -> int | None:
    return request.retention.ToMilliseconds() if request.HasField("retention") else None


def _key_namespace(
    request: pb.CreateApiKeyRequest | pb.ListApiKeysRequest | pb.RevokeApiKeyRequest,
) -> str | None:
    """The namespace a key call is about (None: keys for every namespace)."""
    if request.every_namespace:
        if request.namespace:
            raise InvalidArgumentError("namespace must be empty with every_namespace")
        return None
    return _validate.namespace(request.namespace)


async def key_namespace_by_id(store: Store, key_id: str, principal: Principal | None) -> str | None:
    """The namespace of key ``key_id`` (None: every namespace), found by its id alone (ids
    are unique). A key ``principal`` may not manage is answered as absent: a tenant learns
    nothing of another's keys. ``principal`` None: no authentication (or offline)."""
    found = await store.lookup_api_key(key_id)
    if found is not None and principal is not None:
        try:
            authorize(principal, *key_access(found.key.namespace))
        except PermissionDeniedError:
            found = None
    if found is None:
        reach = "" if principal is None else " that this key may manage"
        raise NotFoundError(f"no key {key_id!r}{reach}")
    return found.key.namespace


def _visible(principal: Principal | None, name: str) -> bool:
    return principal is None or principal.namespace is None or principal.namespace == name


class AdminService(
    AdminFleetMixin,
    AdminLimitsMixin,
    AdminRateLimitsMixin,
    AdminAdmissionMixin,
    AdminBudgetsMixin,
    AdminDefinitionsMixin,
    admin_service_pb2_grpc.AdminServiceServicer,
):
    def __init__(self, store: Store) -> None:
        self._store = store

    async def CreateNamespace(
        self, request: pb.CreateNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateNamespaceResponse:
        record = await self._store.create_namespace(
            _validate.name("namespace", request.namespace),
            request.description,
            _retention_ms(request),
        )
        log.info("namespace %r created by %s", record.name, actor())
        return pb.CreateNamespaceResponse(namespace=namespace_message(record))

    async def DescribeNamespace(
        self, request: pb.DescribeNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.DescribeNamespaceResponse:
        record = await self._store.describe_namespace(_validate.namespace(request.namespace))
        return pb.DescribeNamespaceResponse(namespace=namespace_message(record))

    async def ListNamespaces(
        self, request: pb.ListNamespacesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListNamespacesResponse:
        principal = current_principal.get()
        records = await self._store.list_namespaces()
        return pb.ListNamespacesResponse(
            namespaces=[namespace_message(r) for r in records if _visible(principal, r.name)]
        )

    async def UpdateNamespace(
        self, request: pb.UpdateNamespaceRequest, context: grpc.aio.ServicerContext
    ) -> pb.UpdateNamespaceResponse:
        record = await self._store.update_namespace(
            _validate.namespace(request.namespace),
            request.description if request.HasField("description") else None,
            _retention_ms(request),
            request.payload_quota_bytes if request.HasField("payload_quota_bytes") else None,
        )
        log.info("namespace %r updated by %s", record.name, actor())
        return pb.UpdateNamespaceResponse(namespace=namespace_message(record))

    async def CreateApiKey(
        self, request: pb.CreateApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateApiKeyResponse:
        made = new_key()
        record = await self._store.create_api_key(
            made.key_id,
            made.secret_hash,
            request.role,
            _key_namespace(request),
            request.name,
            request.expires_in.ToMilliseconds() if request.HasField("expires_in") else None,
        )
        log.info(
            "API key %s (%r, %s of %s) created by %s",
            record.key_id,
            record.name,
            record.role,
            record.namespace or "every namespace",
            actor(),
        )
        return pb.CreateApiKeyResponse(key=key_message(record), secret=made.secret)

    async def ListApiKeys(
        self, request: pb.ListApiKeysRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListApiKeysResponse:
        records = await self._store.list_api_keys(_key_namespace(request))
        return pb.ListApiKeysResponse(keys=[key_message(r) for r in records])

    async def RevokeApiKey(
        self, request: pb.RevokeApiKeyRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeApiKeyResponse:
        key_id = _validate.name("key_id", request.key_id)
        if request.every_namespace or request.namespace:
            namespace = _key_namespace(request)
        else:  # by its id alone
            namespace = await key_namespace_by_id(self._store, key_id, current_principal.get())
        record = await self._store.revoke_api_key(key_id, namespace)
        log.info("API key %s (%r) revoked by %s", record.key_id, record.name, actor())
        return pb.RevokeApiKeyResponse(key=key_message(record))
