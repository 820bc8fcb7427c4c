"""``durable-rpc definition list|remove|restore``: workflow definitions and what
references them (AdminService, an admin key in ``DURABLE_RPC_API_KEY``).

``remove`` is the deployment runbook's last step: the server refuses it while a live
worker registers the definition or an open run references it, and says which.
"""

from __future__ import annotations

import click

from durable_rpc.cli._admin import _call, _print, _time, address_option, json_option
from durable_rpc.v1 import admin_service_pb2 as pb

_HEADERS = [
    "name",
    "version",
    "fingerprint",
    "live workers",
    "queued",
    "leased",
    "recoverable",
    "waiting",
    "failed",
    "removed",
]

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace of the definitions."
)
version_option = click.option(
    "--version", default="1", show_default=True, help="Workflow definition version."
)


def _rows(definitions: list[pb.DefinitionInfo]) -> list[list[str]]:
    return [
        [
            d.name,
            d.version,
            d.fingerprint[:12],
            ", ".join(d.live_worker_ids) or "-",
            str(d.queued_runs),
            str(d.leased_runs),
            str(d.recoverable_runs),
            str(d.waiting_runs),
            str(d.failed_runs),
            _time(d.remove_time, d.HasField("remove_time")),
        ]
        for d in definitions
    ]


@click.group()
def definition() -> None:
    """List workflow definitions; remove one nothing references, or restore it."""


@definition.command("list")
@namespace_option
@address_option
@json_option
def definition_list(namespace: str, address: str, as_json: bool) -> None:
    """Each definition with its live workers and its open runs by workflow-task state."""
    request = pb.ListDefinitionsRequest(namespace=namespace)
    reply = _call(address, lambda c: c.call(c.admin_service.ListDefinitions, request))
    _print(reply, as_json, _rows(list(reply.definitions)), _HEADERS)


@definition.command("remove")
@click.argument("name")
@version_option
@namespace_option
@address_option
@json_option
def definition_remove(name: str, version: str, namespace: str, address: str, as_json: bool) -> None:
    """Remove definition NAME: refused while a live worker or an open run references it;
    workers registering it are then refused until `definition restore`."""
    request = pb.RemoveDefinitionRequest(namespace=namespace, name=name, version=version)
    reply = _call(address, lambda c: c.call(c.admin_service.RemoveDefinition, request))
    _print(reply, as_json, _rows([reply.definition]), _HEADERS)


@definition.command("restore")
@click.argument("name")
@version_option
@namespace_option
@address_option
@json_option
def definition_restore(
    name: str, version: str, namespace: str, address: str, as_json: bool
) -> None:
    """Undo `definition remove NAME`: workers may register it again."""
    request = pb.RestoreDefinitionRequest(namespace=namespace, name=name, version=version)
    reply = _call(address, lambda c: c.call(c.admin_service.RestoreDefinition, request))
    _print(reply, as_json, _rows([reply.definition]), _HEADERS)
