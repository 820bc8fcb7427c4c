"""ListDefinitions, RemoveDefinition and RestoreDefinition.

Removal is the deployment runbook's last step: refused (DEFINITION_IN_USE) while a live
worker registers the definition or an open run references it; a removed definition is
refused at registration and at start (DEFINITION_REMOVED) until restored. The store
checks and marks in one transaction (``store/_ops_definitions``). Every change is
logged with the acting key.
"""

from __future__ import annotations

import logging

import grpc

from durable_rpc.server import _convert, _validate
from durable_rpc.server._auth import current_principal
from durable_rpc.store import DefinitionRecord, Store
from durable_rpc.v1 import admin_service_pb2 as pb

log = logging.getLogger("durable_rpc.server.admin")


def definition_message(record: DefinitionRecord) -> pb.DefinitionInfo:
    return pb.DefinitionInfo(
        name=record.name,
        version=record.version,
        fingerprint=record.fingerprint,
        register_time=_convert.timestamp(record.registered_at_ms),
        remove_time=_convert.timestamp(record.removed_at_ms),
        live_worker_ids=record.live_worker_ids,
        queued_runs=record.queued_runs,
        leased_runs=record.leased_runs,
        waiting_runs=record.waiting_runs,
        recoverable_runs=record.recoverable_runs,
        failed_runs=record.failed_runs,
    )


def _actor() -> str:
    principal = current_principal.get()
    return principal.describe() if principal is not None else "unauthenticated caller"


class AdminDefinitionsMixin:
    """The definitions part of AdminService."""

    _store: Store

    async def ListDefinitions(
        self, request: pb.ListDefinitionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListDefinitionsResponse:
        records = await self._store.list_definitions(_validate.namespace(request.namespace))
        return pb.ListDefinitionsResponse(definitions=[definition_message(r) for r in records])

    async def RemoveDefinition(
        self, request: pb.RemoveDefinitionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RemoveDefinitionResponse:
        namespace = _validate.namespace(request.namespace)
        record = await self._store.remove_definition(
            namespace,
            _validate.name("name", request.name),
            _validate.name("version", request.version, required=False),
        )
        log.info(
            "definition (%r, %r) of %r removed by %s",
            record.name,
            record.version,
            namespace,
            _actor(),
        )
        return pb.RemoveDefinitionResponse(definition=definition_message(record))

    async def RestoreDefinition(
        self, request: pb.RestoreDefinitionRequest, context: grpc.aio.ServicerContext
    ) -> pb.RestoreDefinitionResponse:
        namespace = _validate.namespace(request.namespace)
        record = await self._store.restore_definition(
            namespace,
            _validate.name("name", request.name),
            _validate.name("version", request.version, required=False),
        )
        log.info(
            "definition (%r, %r) of %r restored by %s",
            record.name,
            record.version,
            namespace,
            _actor(),
        )
        return pb.RestoreDefinitionResponse(definition=definition_message(record))
