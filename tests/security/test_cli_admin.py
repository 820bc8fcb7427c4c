"""``durable-rpc namespace ...`` and ``durable-rpc token ...`` against a server with
authentication on, as an operator uses them (key in DURABLE_RPC_API_KEY)."""

from __future__ import annotations

import json

import pytest

from tests.cli_process import checked, run_cli
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
