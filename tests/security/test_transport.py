"""TLS, mTLS, and the refusal to serve beyond loopback unprotected (real server
processes; certificates made in the test)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import grpc
import pytest

from durable_rpc import Client, TLSConfig, Worker, activity, workflow
from durable_rpc.errors import StoreUnavailableError
from tests.cli_process import checked, run_cli_async
from tests.e2e.conftest import ROOT, ServerProcess, free_port
from tests.security.conftest import AuthServer, bootstrap_admin_key
from tests.tls_certs import Authority, Pair

pytestmark = pytest.mark.timeout(120)


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn
class Shout:
    @workflow.run
    async def run(self, text: str) -> str:
        return await workflow.execute_activity(
            shout, text, start_to_close_timeout=timedelta(seconds=10)
        )


class Certs:
    def __init__(self, directory: Path) -> None:
        self.ca = Authority(directory, "ca")
        self.server = self.ca.issue("server", server=True)
        self.client = self.ca.issue("client", server=False)
        self.stranger = Authority(directory, "other-ca").issue("stranger", server=False)


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return Certs(tmp_path)


def _tls_server(tmp_path: Path, certs: Certs, *, mutual: bool) -> Iterator[AuthServer]:
    db = tmp_path / "durable.db"
    root = bootstrap_admin_key(f"sqlite:///{db}")
    extra = ["--tls-cert", str(certs.server.cert), "--tls-key", str(certs.server.key)]
    if mutual:
        extra += ["--tls-client-ca", str(certs.ca.pair.cert)]
    server = AuthServer(
        db,
        tmp_path / "server.log",
        *extra,
        tls_ca=certs.ca.pair.cert,
        tls_client=(certs.client.cert, certs.client.key) if mutual else None,
    )
    server.root_key = root  # type: ignore[attr-defined]
    server.start()
    yield server
    server.stop()


@pytest.fixture
def tls_server(tmp_path: Path, certs: Certs) -> Iterator[AuthServer]:
    yield from _tls_server(tmp_path, certs, mutual=False)


@pytest.fixture
def mtls_server(tmp_path: Path, certs: Certs) -> Iterator[AuthServer]:
    yield from _tls_server(tmp_path, certs, mutual=True)


def _mutual_health_check(server: AuthServer, ca: Pair, pair: Pair) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    credentials = grpc.ssl_channel_credentials(
        ca.cert.read_bytes(), pair.key.read_bytes(), pair.cert.read_bytes()
    )
    with grpc.secure_channel(server.address, credentials) as channel:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)


async def test_tls_carries_the_calls_and_plain_text_is_refused(
    tls_server: AuthServer, certs: Certs
) -> None:
    root: str = tls_server.root_key  # type: ignore[attr-defined]
    tls = TLSConfig(ca_cert=certs.ca.pair.cert)
    async with await Client.connect(tls_server.address, api_key=root, tls=tls) as client:
        assert [r async for r in client.list_workflows()] == []
    with pytest.raises(StoreUnavailableError):
        await Client.connect(tls_server.address, api_key=root, timeout=2)
    # A server certificate from a CA the client does not trust is refused too.
    untrusted = TLSConfig(ca_cert=certs.stranger.cert)
    with pytest.raises(StoreUnavailableError):
        await Client.connect(tls_server.address, api_key=root, tls=untrusted, timeout=2)


async def test_mtls_refuses_clients_without_a_certificate_from_its_ca(
    mtls_server: AuthServer, certs: Certs
) -> None:
    root: str = mtls_server.root_key  # type: ignore[attr-defined]
    for refused in (
        TLSConfig(ca_cert=certs.ca.pair.cert),
        TLSConfig(
            ca_cert=certs.ca.pair.cert,
            client_cert=certs.stranger.cert,
            client_key=certs.stranger.key,
        ),
    ):
        with pytest.raises(StoreUnavailableError):
            await Client.connect(mtls_server.address, api_key=root, tls=refused, timeout=2)
    _mutual_health_check(mtls_server, certs.ca.pair, certs.client)


async def test_the_cli_and_a_worker_run_over_mtls_with_keys_from_the_environment(
    mtls_server: AuthServer, certs: Certs, monkeypatch: pytest.MonkeyPatch
) -> None:
    root: str = mtls_server.root_key  # type: ignore[attr-defined]
    env = {
        "DURABLE_RPC_ADDRESS": mtls_server.address,
        "DURABLE_RPC_TLS_CA": str(certs.ca.pair.cert),
        "DURABLE_RPC_TLS_CERT": str(certs.client.cert),
        "DURABLE_RPC_TLS_KEY": str(certs.client.key),
        "DURABLE_RPC_API_KEY": root,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    worker_key = checked(
        await run_cli_async("token", "create", "--role", "worker", "--namespace", "default")
    ).strip()
    client_key = checked(
        await run_cli_async("token", "create", "--role", "client", "--namespace", "default")
    ).strip()
    queue = f"q-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("DURABLE_RPC_API_KEY", worker_key)
    async with (
        await Client.connect() as worker_client,
        Worker(worker_client, task_queue=queue, workflows=[Shout], activities=[shout]),
    ):
        monkeypatch.setenv("DURABLE_RPC_API_KEY", client_key)
        started = checked(
            await run_cli_async(
                "workflow",
                "start",
                "Shout",
                "--id",
                "shout-1",
                "--task-queue",
                queue,
                "--input",
                '["hello"]',
                "--json",
            )
        )
        assert "shout-1" in started
        result = checked(
            await run_cli_async("workflow", "result", "shout-1", "--timeout", "20", "--json")
        )
        assert "HELLO" in result


def test_beyond_loopback_the_server_needs_tls_and_auth_or_insecure(tmp_path: Path) -> None:
    listen = f"0.0.0.0:{free_port()}"
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_rpc.cli",
            "server",
            "--db",
            f"sqlite:///{tmp_path / 'x.db'}",
            "--listen",
            listen,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert refused.returncode != 0
    assert "refusing to listen on" in refused.stderr
    assert "--insecure" in refused.stderr and "--auth" in refused.stderr
    assert "Traceback" not in refused.stderr

    # --insecure: the operator says so explicitly, and the server starts (and says how).
    server = ServerProcess(
        tmp_path / "y.db", tmp_path / "y.log", "--insecure", listen_host="0.0.0.0"
    )
    server.start()
    try:
        assert "plain text" in server.log_path.read_text()
    finally:
        server.stop()
