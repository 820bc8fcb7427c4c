"""``durable-rpc namespace ...`` and ``durable-rpc token ...``: tenants and API keys.

Both talk to a server through AdminService (with the key in ``DURABLE_RPC_API_KEY``).
``token`` also works offline with ``--db URL``, straight against the database, so the
first admin key can be made before any server starts. A new key's secret is printed
alone on stdout, once, and never anywhere else.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from google.protobuf import duration_pb2, json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Column, Table

from durable_rpc.auth import new_key
from durable_rpc.client import Client, default_address
from durable_rpc.errors import DurableRpcError
from durable_rpc.server._admin_service import (
    key_message,
    key_namespace_by_id,
    namespace_message,
)
from durable_rpc.store import open_store
from durable_rpc.v1 import admin_service_pb2 as pb

T = TypeVar("T")
console = Console()

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d|w)\s*$")


def parse_duration_ms(text: str) -> int:
    """``90s``, ``30m``, ``12h``, ``30d``, ``2w`` as milliseconds."""
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) <= 0:
        raise click.BadParameter(f"{text!r} is not a duration like 90s, 30m, 12h, 30d or 2w")
    return int(match.group(1)) * _UNITS_MS[match.group(2)]


def _duration(ms: int) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    value.FromMilliseconds(ms)
    return value


def _call(address: str, action: Callable[[Client], Awaitable[T]]) -> T:
    async def go() -> T:
        client = await Client.connect(address)
        try:
            return await action(client)
        finally:
            await client.close()

    return _guarded(go())


def _offline(db_url: str, action: Callable[[Any], Awaitable[T]]) -> T:
    async def go() -> T:
        store = open_store(db_url)
        await store.open()
        try:
            return await action(store)
        finally:
            await store.close()

    return _guarded(go())


def _guarded(work: Awaitable[T]) -> T:
    try:
        return asyncio.run(work)  # type: ignore[arg-type]
    except DurableRpcError as exc:
        raise click.ClickException(str(exc)) from None


def _print(message: Message, as_json: bool, rows: list[list[str]], headers: list[str]) -> None:
    if as_json:
        click.echo(json.dumps(json_format.MessageToDict(message), indent=2))
        return
    # The first column names each row (a namespace, a key id: what the next command
    # takes): never cut, however narrow the terminal; the others give way.
    first, *rest = headers
    table = Table(
        Column(first, no_wrap=True, min_width=max((len(row[0]) for row in rows), default=0)),
        *rest,
    )
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _time(ts: Any, present: bool) -> str:
    if not present:
        return "-"
    return dt.datetime.fromtimestamp(ts.ToMilliseconds() / 1000, dt.UTC).isoformat(
        timespec="seconds"
    )


def _namespace_rows(namespaces: list[pb.Namespace]) -> list[list[str]]:
    return [
        [
            n.name,
            n.description,
            f"{n.retention.ToSeconds() / 3600:g}h",
            f"{n.payload_stored_bytes} / {n.payload_quota_bytes}",
            _time(n.create_time, n.HasField("create_time")),
        ]
        for n in namespaces
    ]


_NAMESPACE_HEADERS = ["namespace", "description", "retention", "payload bytes / quota", "created"]
address_option = click.option(
    "--address",
    default=default_address,
    show_default="$DURABLE_RPC_ADDRESS or 127.0.0.1:7233",
    help="HOST:PORT of the durable-rpc server.",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def namespace() -> None:
    """Create, describe, list and update namespaces (the tenants)."""


@namespace.command("create")
@click.argument("name")
@click.option("--description", default="", help="What the namespace is for.")
@click.option("--retention", default=None, help="How long closed runs are kept (e.g. 30d).")
@address_option
@json_option
def namespace_create(
    name: str, description: str, retention: str | None, address: str, as_json: bool
) -> None:
    """Create namespace NAME (a cluster admin's key)."""
    request = pb.CreateNamespaceRequest(namespace=name, description=description)
    if retention is not None:
        request.retention.CopyFrom(_duration(parse_duration_ms(retention)))
    reply = _call(address, lambda c: c.call(c.admin_service.CreateNamespace, request))
    _print(reply, as_json, _namespace_rows([reply.namespace]), _NAMESPACE_HEADERS)


@namespace.command("describe")
@click.argument("name")
@address_option
@json_option
def namespace_describe(name: str, address: str, as_json: bool) -> None:
    """Show namespace NAME."""
    request = pb.DescribeNamespaceRequest(namespace=name)
    reply = _call(address, lambda c: c.call(c.admin_service.DescribeNamespace, request))
    _print(reply, as_json, _namespace_rows([reply.namespace]), _NAMESPACE_HEADERS)


@namespace.command("list")
@address_option
@json_option
def namespace_list(address: str, as_json: bool) -> None:
    """List the namespaces your key can see."""
    request = pb.ListNamespacesRequest()
    reply = _call(address, lambda c: c.call(c.admin_service.ListNamespaces, request))
    _print(reply, as_json, _namespace_rows(list(reply.namespaces)), _NAMESPACE_HEADERS)


@namespace.command("update")
@click.argument("name")
@click.option("--description", default=None, help="A new description (default: unchanged).")
@click.option("--retention", default=None, help="How long closed runs are kept (e.g. 30d).")
@click.option(
    "--payload-quota-bytes",
    type=click.IntRange(min=1),
    default=None,
    help="The most bytes of stored payloads the namespace may hold (default: unchanged).",
)
@address_option
@json_option
def namespace_update(
    name: str,
    description: str | None,
    retention: str | None,
    payload_quota_bytes: int | None,
    address: str,
    as_json: bool,
) -> None:
    """Change namespace NAME's description, retention or payload quota."""
    request = pb.UpdateNamespaceRequest(namespace=name, payload_quota_bytes=payload_quota_bytes)
    if description is not None:
        request.description = description
    if retention is not None:
        request.retention.CopyFrom(_duration(parse_duration_ms(retention)))
    reply = _call(address, lambda c: c.call(c.admin_service.UpdateNamespace, request))
    _print(reply, as_json, _namespace_rows([reply.namespace]), _NAMESPACE_HEADERS)


db_option = click.option(
    "--db",
    "db_url",
    default=None,
    help="Work offline against this database (sqlite:///path or postgresql://...) "
    "instead of a server: how the first admin key is made.",
)


def _scope(role: str | None, namespace_name: str | None) -> tuple[str | None, bool]:
    """(namespace, every_namespace): an admin key with no --namespace is for every
    namespace (a cluster admin); any other key without one is for 'default'."""
    if namespace_name is not None:
        return namespace_name, False
    if role == "admin":
        return None, True
    return "default", False


def _key_rows(keys: list[pb.ApiKey]) -> list[list[str]]:
    return [
        [
            k.key_id,
            k.name,
            k.role,
            k.namespace or "*",
            _time(k.create_time, k.HasField("create_time")),
            _time(k.expire_time, k.HasField("expire_time")),
            _time(k.revoke_time, k.HasField("revoke_time")),
        ]
        for k in keys
    ]


_KEY_HEADERS = ["id", "name", "role", "namespace", "created", "expires", "revoked"]


@click.group()
def token() -> None:
    """Create, list and revoke API keys."""


@token.command("create")
@click.option(
    "--role",
    type=click.Choice(["client", "worker", "admin"]),
    required=True,
    help="client: drive runs; worker: poll and report tasks; admin: also namespaces and keys "
    "(docs/security.md).",
)
@click.option(
    "--namespace",
    "namespace_name",
    default=None,
    help="The key's namespace. Default: every namespace for an admin key (a cluster "
    "admin), 'default' for others.",
)
@click.option("--name", default="", help="A label shown in listings and logs.")
@click.option("--expires-in", default=None, help="e.g. 90d; default: never.")
@db_option
@address_option
def token_create(
    role: str,
    namespace_name: str | None,
    name: str,
    expires_in: str | None,
    db_url: str | None,
    address: str,
) -> None:
    """Make a key and print its secret alone on stdout (shown this once only)."""
    scope, every = _scope(role, namespace_name)
    expires_ms = parse_duration_ms(expires_in) if expires_in is not None else None
    if db_url is not None:
        made = new_key()
        _offline(
            db_url,
            lambda store: store.create_api_key(
                made.key_id, made.secret_hash, role, scope, name, expires_ms
            ),
        )
        secret = made.secret
    else:
        request = pb.CreateApiKeyRequest(
            role=role, namespace=scope or "", name=name, every_namespace=every
        )
        if expires_ms is not None:
            request.expires_in.CopyFrom(_duration(expires_ms))
        reply = _call(address, lambda c: c.call(c.admin_service.CreateApiKey, request))
        secret = reply.secret
    click.echo(secret)


@token.command("list")
@click.option("--namespace", "namespace_name", default=None, help="Default: every key.")
@db_option
@address_option
@json_option
def token_list(namespace_name: str | None, db_url: str | None, address: str, as_json: bool) -> None:
    """List keys (never their secrets)."""
    if db_url is not None:
        records = _offline(db_url, lambda store: store.list_api_keys(namespace_name))
        reply = pb.ListApiKeysResponse(keys=[key_message(r) for r in records])
    else:
        request = pb.ListApiKeysRequest(
            namespace=namespace_name or "", every_namespace=namespace_name is None
        )
        reply = _call(address, lambda c: c.call(c.admin_service.ListApiKeys, request))
    _print(reply, as_json, _key_rows(list(reply.keys)), _KEY_HEADERS)


@token.command("revoke")
@click.argument("key_id")
@click.option(
    "--namespace",
    "namespace_name",
    default=None,
    help="Revoke KEY_ID only if it is a key of this namespace (default: wherever it is).",
)
@db_option
@address_option
def token_revoke(key_id: str, namespace_name: str | None, db_url: str | None, address: str) -> None:
    """Revoke key KEY_ID: refused from the next call on, on every replica."""
    if db_url is not None:

        async def revoke(store: Any) -> None:
            scope = namespace_name
            if scope is None:
                scope = await key_namespace_by_id(store, key_id, None)
            await store.revoke_api_key(key_id, scope)

        _offline(db_url, revoke)
    else:
        # No namespace: the server finds the key by its id (ids are unique).
        request = pb.RevokeApiKeyRequest(key_id=key_id, namespace=namespace_name or "")
        _call(address, lambda c: c.call(c.admin_service.RevokeApiKey, request))
    click.echo(f"revoked {key_id}")


__all__ = ["namespace", "namespace_message", "token"]
