"""A server process with authentication on (and, for some tests, TLS), bootstrapped as an
operator would: the first admin key made offline with ``durable-rpc token create --db``.
Its database is ``server_db_url``'s (tests/conftest.py): SQLite, and PostgreSQL too for
tests marked ``also_on_postgres``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from durable_rpc import Client
from durable_rpc.v1 import admin_service_pb2 as admin_pb
from tests.cli_process import checked, run_cli
from tests.e2e.conftest import ServerProcess

NS_A = "team-a"
NS_B = "team-b"


class AuthServer(ServerProcess):
    """``durable-rpc server --auth`` on a SQLite file (or ``db_url``'s database); with
    ``tls_ca`` the health check that waits for it to start goes over TLS (the server's
    extra args carry the cert), with ``tls_client`` as its client certificate for an mTLS
    server."""

    def __init__(
        self,
        db_path: Path,
        log_path: Path,
        *extra: str,
        tls_ca: Path | None = None,
        tls_client: tuple[Path, Path] | None = None,
        db_url: str | None = None,
    ):
        super().__init__(db_path, log_path, "--auth", *extra, db_url=db_url)
        self.tls_ca = tls_ca
        #: (certificate, key) this test's client presents to an mTLS server.
        self.tls_client = tls_client

    def health_channel(self) -> grpc.Channel:
        if self.tls_ca is None:
            return super().health_channel()
        cert, key = (p.read_bytes() for p in self.tls_client) if self.tls_client else (None, None)
        credentials = grpc.ssl_channel_credentials(self.tls_ca.read_bytes(), key, cert)
        return grpc.secure_channel(self.address, credentials)


def bootstrap_admin_key(db_url: str) -> str:
    """The operator's first step: a cluster admin key made offline (printed alone)."""
    out = checked(run_cli("token", "create", "--role", "admin", "--name", "root", "--db", db_url))
    secret = out.strip()
    assert secret.startswith("drpc_") and "\n" not in secret
    return secret


@dataclass
class Keys:
    """One key of each kind the matrix needs (team-a's unless named otherwise)."""

    root: str
    client: str
    worker: str
    admin: str
    admin_b: str
    client_b: str
    worker_b: str
    worker_2: str
    revoked: str
    expired: str


@pytest.fixture
def auth_server(tmp_path: Path, server_db_url: str) -> Iterator[AuthServer]:
    root = bootstrap_admin_key(server_db_url)
    server = AuthServer(tmp_path / "durable.db", tmp_path / "server.log", db_url=server_db_url)
    server.root_key = root  # type: ignore[attr-defined]
    server.start()
    yield server
    server.stop()


async def make_key(root: Client, role: str, namespace: str, name: str = "", **extra: object) -> str:
    request = admin_pb.CreateApiKeyRequest(role=role, namespace=namespace, name=name, **extra)
    reply = await root.call(root.admin_service.CreateApiKey, request)
    return str(reply.secret)


@pytest.fixture
async def keys(auth_server: AuthServer) -> AsyncIterator[Keys]:
    root_secret: str = auth_server.root_key  # type: ignore[attr-defined]
    async with await Client.connect(auth_server.address, api_key=root_secret) as root:
        for namespace in (NS_A, NS_B):
            await root.call(
                root.admin_service.CreateNamespace,
                admin_pb.CreateNamespaceRequest(namespace=namespace),
            )
        revoked = await make_key(root, "client", NS_A, "revoked")
        expired = await make_key(root, "client", NS_A, "expired", expires_in={"nanos": 1_000_000})
        await root.call(
            root.admin_service.RevokeApiKey,
            admin_pb.RevokeApiKeyRequest(key_id=revoked.split("_")[1], namespace=NS_A),
        )
        yield Keys(
            root=root_secret,
            client=await make_key(root, "client", NS_A, "client-a"),
            worker=await make_key(root, "worker", NS_A, "worker-a"),
            admin=await make_key(root, "admin", NS_A, "admin-a"),
            admin_b=await make_key(root, "admin", NS_B, "admin-b"),
            client_b=await make_key(root, "client", NS_B, "client-b"),
            worker_b=await make_key(root, "worker", NS_B, "worker-b"),
            worker_2=await make_key(root, "worker", NS_A, "worker-a-2"),
            revoked=revoked,
            expired=expired,
        )
