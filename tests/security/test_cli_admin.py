"""``durable-rpc namespace ...`` and ``durable-rpc token ...`` against a server with
authentication on, as an operator uses them (key in DURABLE_RPC_API_KEY)."""

from __future__ import annotations

import json
import subprocess

import pytest

from durable_rpc import Client
from durable_rpc.v1 import admin_service_pb2 as admin_pb
from tests.cli_process import checked, run_cli, run_cli_async
from tests.security.conftest import AuthServer

pytestmark = pytest.mark.timeout(120)


def test_namespaces_and_keys_from_the_cli(auth_server: AuthServer) -> None:
    root: str = auth_server.root_key  # type: ignore[attr-defined]
    env = {"DURABLE_RPC_API_KEY": root}

    def cli(*args: str) -> str:
        return checked(run_cli(*args, address=auth_server.address, env=env))

    created = json.loads(
        cli(
            "namespace",
            "create",
            "payments",
            "--description",
            "cards",
            "--retention",
            "30d",
            "--json",
        )
    )
    assert created["namespace"]["name"] == "payments"
    assert created["namespace"]["retention"] == f"{30 * 86400}s"
    cli("namespace", "update", "payments", "--retention", "7d")
    described = json.loads(cli("namespace", "describe", "payments", "--json"))
    assert described["namespace"]["retention"] == f"{7 * 86400}s"
    assert described["namespace"]["description"] == "cards"
    listed = json.loads(cli("namespace", "list", "--json"))
    assert [n["name"] for n in listed["namespaces"]] == ["default", "payments"]

    secret = cli(
        "token",
        "create",
        "--role",
        "worker",
        "--namespace",
        "payments",
        "--name",
        "payments-workers",
        "--expires-in",
        "90d",
    ).strip()
    assert secret.startswith("drpc_") and "\n" not in secret
    key_id = secret.split("_")[1]
    keys = json.loads(cli("token", "list", "--json"))["keys"]
    mine = next(k for k in keys if k["keyId"] == key_id)
    assert (mine["role"], mine["namespace"], mine["name"]) == (
        "worker",
        "payments",
        "payments-workers",
    )
    assert "expireTime" in mine and "revokeTime" not in mine
    assert secret.split("_", 2)[2] not in json.dumps(keys)
    cli("token", "revoke", key_id, "--namespace", "payments")
    keys = json.loads(cli("token", "list", "--namespace", "payments", "--json"))["keys"]
    assert [k["keyId"] for k in keys if "revokeTime" in k] == [key_id]

    # Without a key, or with the worker key, administration is refused in one line.
    refused = run_cli(
        "namespace", "list", address=auth_server.address, env={"DURABLE_RPC_API_KEY": ""}
    )
    assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr
    assert "Traceback" not in refused.stderr
    bad = run_cli(
        "namespace", "create", "x", address=auth_server.address, env={"DURABLE_RPC_API_KEY": secret}
    )
    assert bad.returncode != 0 and "UNAUTHENTICATED" in bad.stderr  # revoked by now


async def _keys_by_api(server: AuthServer, *made: tuple[str, str | None]) -> list[str]:
    """Namespaces team-a and team-b, then a key of each (role, namespace) in ``made``
    (namespace None: an admin key for every namespace), made over the API: the CLI part of
    a test is what it is about."""
    root: str = server.root_key  # type: ignore[attr-defined]
    async with await Client.connect(server.address, api_key=root) as client:
        for name in ("team-a", "team-b"):
            await client.call(
                client.admin_service.CreateNamespace,
                admin_pb.CreateNamespaceRequest(namespace=name),
            )
        secrets = []
        for role, namespace in made:
            request = admin_pb.CreateApiKeyRequest(
                role=role, namespace=namespace or "", every_namespace=namespace is None
            )
            reply = await client.call(client.admin_service.CreateApiKey, request)
            secrets.append(str(reply.secret))
        return secrets


def _key_id(secret: str) -> str:
    return secret.split("_")[1]


async def test_token_revoke_finds_a_key_by_its_id_alone(auth_server: AuthServer) -> None:
    root: str = auth_server.root_key  # type: ignore[attr-defined]
    client_a, admin_a, client_b, cluster_admin, in_default, worker_a = await _keys_by_api(
        auth_server,
        ("client", "team-a"),
        ("admin", "team-a"),
        ("client", "team-b"),
        ("admin", None),
        ("worker", "default"),
        ("worker", "team-a"),
    )

    async def revoke(key_id: str, key: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return await run_cli_async(
            "token",
            "revoke",
            key_id,
            *extra,
            address=auth_server.address,
            env={"DURABLE_RPC_API_KEY": key},
        )

    # A namespace admin revokes its namespace's key by id alone...
    done = await revoke(_key_id(client_a), admin_a)
    assert checked(done).strip() == f"revoked {_key_id(client_a)}"
    # ...but not another namespace's, nor a cluster admin's key: as if they did not exist.
    for other in (client_b, cluster_admin):
        refused = await revoke(_key_id(other), admin_a)
        assert refused.returncode != 0 and "NOT_FOUND" in refused.stderr, refused.stderr
        assert "team-b" not in refused.stderr and "Traceback" not in refused.stderr
    # A cluster admin revokes any key by id alone: a namespace's, 'default''s, or one
    # for every namespace.
    for secret in (client_b, in_default, cluster_admin):
        checked(await revoke(_key_id(secret), root))
    # --namespace still restricts the revocation to that namespace's keys.
    wrong = await revoke(_key_id(worker_a), root, "--namespace", "team-b")
    assert wrong.returncode != 0 and "NOT_FOUND" in wrong.stderr
    unknown = await revoke("0123456789abcdef", root)
    assert unknown.returncode != 0 and "no key '0123456789abcdef'" in unknown.stderr

    listed = await run_cli_async(
        "token", "list", "--json", address=auth_server.address, env={"DURABLE_RPC_API_KEY": root}
    )
    revoked = {k["keyId"] for k in json.loads(checked(listed))["keys"] if "revokeTime" in k}
    assert revoked == {_key_id(s) for s in (client_a, client_b, in_default, cluster_admin)}


async def test_token_revoke_offline_finds_a_key_by_its_id_alone(auth_server: AuthServer) -> None:
    (secret,) = await _keys_by_api(auth_server, ("client", "team-a"))
    checked(await run_cli_async("token", "revoke", _key_id(secret), "--db", auth_server.db_url))
    root: str = auth_server.root_key  # type: ignore[attr-defined]
    async with await Client.connect(auth_server.address, api_key=root) as client:
        reply = await client.call(
            client.admin_service.ListApiKeys, admin_pb.ListApiKeysRequest(namespace="team-a")
        )
    assert [k.key_id for k in reply.keys if k.HasField("revoke_time")] == [_key_id(secret)]


async def test_token_list_never_cuts_a_key_id_in_a_narrow_terminal(
    auth_server: AuthServer,
) -> None:
    root: str = auth_server.root_key  # type: ignore[attr-defined]
    made = await _keys_by_api(auth_server, ("client", "team-a"), ("worker", "team-b"))
    table = checked(
        await run_cli_async(
            "token",
            "list",
            address=auth_server.address,
            env={"DURABLE_RPC_API_KEY": root, "COLUMNS": "60"},
        )
    )
    assert max(len(line) for line in table.splitlines()) <= 60, table
    for secret in [root, *made]:
        assert _key_id(secret) in table, table


def test_a_namespaces_payload_quota_is_set_and_shown_from_the_cli(
    auth_server: AuthServer,
) -> None:
    env = {"DURABLE_RPC_API_KEY": auth_server.root_key}  # type: ignore[attr-defined]

    def cli(*args: str) -> str:
        return checked(run_cli(*args, address=auth_server.address, env=env))

    cli("namespace", "create", "uploads")
    cli("namespace", "update", "uploads", "--payload-quota-bytes", "300000")
    described = json.loads(cli("namespace", "describe", "uploads", "--json"))["namespace"]
    quota_key = next(k for k in described if k.lower().replace("_", "") == "payloadquotabytes")
    assert int(described[quota_key]) == 300_000
    assert "0 / 300000" in cli("namespace", "describe", "uploads")
    refused = run_cli(
        "namespace",
        "update",
        "uploads",
        "--payload-quota-bytes",
        "0",
        address=auth_server.address,
        env=env,
    )
    assert refused.returncode != 0
    assert "--payload-quota-bytes" in refused.stderr
