"""Every RPC of every service, for every kind of caller: the expected code and reason for
each, and no state change on any refusal (real server process, real socket; the full
matrix on SQLite and on PostgreSQL)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from typing import Any

import grpc
import psycopg
import pytest
from google.protobuf import message_factory
from google.protobuf.message import Message
from psycopg import sql

from durable_rpc import Client, payload
from durable_rpc._rpc_status import from_rpc_error
from durable_rpc.v1 import (
    admin_service_pb2,
    payload_pb2,
    payload_service_pb2,
    schedule_service_pb2,
    service_pb2,
    session_service_pb2,
)
from tests.security.conftest import NS_A, AuthServer, Keys, make_key

pytestmark = pytest.mark.timeout(240)

SERVICES = [
    service_pb2.DESCRIPTOR.services_by_name["WorkflowService"],
    service_pb2.DESCRIPTOR.services_by_name["WorkerService"],
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"],
    schedule_service_pb2.DESCRIPTOR.services_by_name["ScheduleService"],
    payload_service_pb2.DESCRIPTOR.services_by_name["PayloadService"],
    session_service_pb2.DESCRIPTOR.services_by_name["WorkerSessionService"],
]
UNKNOWN_KEY = "drpc_00000000deadbeef_" + "A" * 43

#: Who calls, by the Keys attribute holding their secret (None: no key at all).
CALLERS = [
    "none",
    "malformed",
    "unknown",
    "revoked",
    "expired",
    "client",
    "worker",
    "admin",
    "admin_b",
    "root",
]
UNAUTHENTICATED_CALLERS = {"none", "malformed", "unknown", "revoked", "expired"}


def secret_of(keys: Keys, caller: str) -> str | None:
    return {
        "none": None,
        "malformed": "not-a-key",
        "unknown": UNKNOWN_KEY,
    }.get(caller, getattr(keys, caller, None))


def allowed(service: str, method: str, caller: str) -> bool:
    """The role table of docs/security.md, written out independently of the server's."""
    if caller in UNAUTHENTICATED_CALLERS:
        return False
    if service in {"WorkflowService", "ScheduleService"}:
        return caller in {"client", "admin", "root"}
    if service == "WorkerService" and method == "GetServerInfo":
        return True  # any valid key: it names no namespace and changes nothing
    if service == "WorkerService":
        return caller in {"worker", "admin", "root"}
    if service == "PayloadService":
        return caller in {"client", "worker", "admin", "root"}
    if service == "WorkerSessionService" and method in (
        "DescribeWorkerSession",
        "ListWorkerSessions",
    ):
        return caller in {"client", "worker", "admin", "root"}
    if service == "WorkerSessionService":
        return caller in {"worker", "admin", "root"}
    if method == "CreateNamespace":
        return caller == "root"
    if method == "ListNamespaces":
        return True
    return caller in {"admin", "root"}  # team-a's namespace and keys


def request_for(method: Any, victim_key_id: str, tag: str) -> Message:
    """A request that would change state if it were let through (ids unique per tag)."""
    request = message_factory.GetMessageClass(method.input_type)()
    values: dict[str, Any] = {
        "namespace": NS_A,
        "workflow_id": "victim",
        "schedule_id": "victim-schedule",
        "workflow_type": "Victim",
        "task_queue": "q",
        "worker_id": f"w-{tag}",
        "signal_name": "poke",
        "query_name": "state",
        "update_name": "change",
        "reason": "matrix",
        "request_id": f"r-{tag}",
        "role": "client",
        "name": f"k-{tag}",
        "key_id": victim_key_id,
        "description": f"changed by {tag}",
        "stream": "victim-stream",
    }
    fields = request.DESCRIPTOR.fields_by_name
    for name, value in values.items():
        if name in fields and fields[name].type == fields[name].TYPE_STRING:
            setattr(request, name, value)
    if method.name == "StartWorkflow":
        request.workflow_id = f"started-{tag}"
    if method.name == "CompleteTasks":
        item = request.outcomes.add().complete_activity_task
        item.namespace = NS_A
        item.lease.task_id, item.lease.worker_id, item.lease.fencing_token = 1, f"w-{tag}", 1
    if method.name in ("CreateSchedule", "UpdateSchedule"):
        definition = request.definition
        definition.workflow_type, definition.task_queue = "Victim", "q"
        definition.spec.interval.FromSeconds(3600)
    if method.name == "CreateNamespace":
        request.namespace = f"ns-{tag}"
    if method.name == "AppendStream":
        item = request.items.add(dedup_id=f"d-{tag}")
        item.payload.CopyFrom(payload_pb2.Payload(data=payload.encode([1])))
    for name in ("input", "signal_input", "update_input"):
        if name in fields and fields[name].message_type.name == "Payload":
            getattr(request, name).CopyFrom(payload_pb2.Payload(data=payload.encode([1])))
    return request


def call(
    address: str, service: Any, method: Any, request: Message, secret: str | None
) -> grpc.StatusCode:
    metadata = [] if secret is None else [("authorization", f"Bearer {secret}")]
    with grpc.insecure_channel(address) as channel:
        stub = channel.unary_unary(
            f"/{service.full_name}/{method.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=lambda b: b,
        )
        try:
            stub(request, metadata=metadata, timeout=1.5)
        except grpc.RpcError as exc:
            code: grpc.StatusCode = exc.code()  # type: ignore[attr-defined]
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                # A refusal carries its stable reason (google.rpc.ErrorInfo).
                assert from_rpc_error(exc).reason == code.name  # type: ignore[arg-type]
            return code
        return grpc.StatusCode.OK


def database_digest(db_url: str) -> str:
    """Every table's rows: any refused call that wrote anything changes this. Rows are
    compared as a sorted list, so the digest does not depend on a scan's order."""
    digest = hashlib.sha256()
    for table, rows in sorted(_tables(db_url).items()):
        digest.update(table.encode())
        for row in sorted(repr(row) for row in rows):
            digest.update(row.encode())
    return digest.hexdigest()


def _tables(db_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """{table: its rows} of the server's database, read without writing."""
    if db_url.startswith("sqlite:///"):
        path = db_url.removeprefix("sqlite:///")
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {
                name: connection.execute(f'SELECT * FROM "{name}"').fetchall()
                for (name,) in names.fetchall()
            }
        finally:
            connection.close()
    with psycopg.connect(db_url) as conn:
        conn.read_only = True
        names = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_type = 'BASE TABLE'"
            " AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        return {
            f"{schema}.{name}": conn.execute(
                sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, name))
            ).fetchall()
            for schema, name in names
        }


@pytest.mark.also_on_postgres
async def test_every_rpc_for_every_caller(auth_server: AuthServer, keys: Keys) -> None:
    async with await Client.connect(
        auth_server.address, namespace=NS_A, api_key=keys.client
    ) as client:
        await client.start_workflow("Victim", 1, id="victim", task_queue="q")
    victim_key = await _victim_key(auth_server, keys)
    cases: list[tuple[Any, Any, str]] = [
        (service, method, caller)
        for service in SERVICES
        for method in service.methods
        for caller in CALLERS
    ]
    refused = [c for c in cases if not allowed(c[0].name, c[1].name, c[2])]
    let_through = [c for c in cases if allowed(c[0].name, c[1].name, c[2])]
    assert len(cases) == sum(len(s.methods) for s in SERVICES) * len(CALLERS)

    before = database_digest(auth_server.db_url)
    for index, (service, method, caller) in enumerate(refused):
        code = call(
            auth_server.address,
            service,
            method,
            request_for(method, victim_key, f"refused-{index}"),
            secret_of(keys, caller),
        )
        expected = (
            grpc.StatusCode.UNAUTHENTICATED
            if caller in UNAUTHENTICATED_CALLERS
            else grpc.StatusCode.PERMISSION_DENIED
        )
        assert code == expected, (service.name, method.name, caller, code)
    assert database_digest(auth_server.db_url) == before, "a refused call changed state"

    for index, (service, method, caller) in enumerate(let_through):
        code = call(
            auth_server.address,
            service,
            method,
            request_for(method, victim_key, f"allowed-{index}"),
            secret_of(keys, caller),
        )
        assert code not in (
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
        ), (service.name, method.name, caller, code)
    # The let-through half did reach the store (the refused half could have too).
    assert database_digest(auth_server.db_url) != before
    print(f"matrix: {len(cases)} calls, {len(refused)} refused, {len(let_through)} let through")


async def _victim_key(auth_server: AuthServer, keys: Keys) -> str:
    async with await Client.connect(auth_server.address, api_key=keys.root) as root:
        secret = await make_key(root, "client", NS_A, "victim")
    return secret.split("_")[1]


@pytest.mark.parametrize("caller", CALLERS)
def test_reflection_needs_a_valid_key(auth_server: AuthServer, keys: Keys, caller: str) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    secret = secret_of(keys, caller)
    metadata = [] if secret is None else [("authorization", f"Bearer {secret}")]
    with grpc.insecure_channel(auth_server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        replies: Callable[[], list[Any]] = lambda: list(  # noqa: E731
            stub.ServerReflectionInfo(iter([request]), metadata=metadata, timeout=5)
        )
        if caller in UNAUTHENTICATED_CALLERS:
            with pytest.raises(grpc.RpcError) as refused:
                replies()
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
        else:
            (reply,) = replies()
            names = {s.name for s in reply.list_services_response.service}
            assert "durable_rpc.v1.AdminService" in names


def test_health_needs_no_key(auth_server: AuthServer) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(auth_server.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def _worker_id_paths(
    message: Any, prefix: str = "", seen: frozenset[str] = frozenset()
) -> list[str]:
    paths = []
    for field in message.fields:
        if field.name == "worker_id":
            paths.append(prefix + "worker_id")
        elif field.message_type is not None and field.message_type.full_name not in seen:
            paths += _worker_id_paths(
                field.message_type, f"{prefix}{field.name}.", seen | {message.full_name}
            )
    return paths


def test_every_worker_id_a_worker_request_holds_is_bound_to_its_key() -> None:
    """The server rebinds worker ids at known places (server/_auth.py): a new field
    holding one elsewhere would escape the binding, so it must fail here first."""
    bound = {"worker_id", "lease.worker_id"}
    batch_items = {
        f"outcomes.{kind}.lease.worker_id"
        for kind in (
            "complete_workflow_task",
            "fail_workflow_task",
            "complete_activity_task",
            "fail_activity_task",
        )
    }
    for service in (
        service_pb2.DESCRIPTOR.services_by_name["WorkerService"],
        session_service_pb2.DESCRIPTOR.services_by_name["WorkerSessionService"],
    ):
        for method in service.methods:
            for path in _worker_id_paths(method.input_type):
                assert path in bound | batch_items, (method.name, path)


@pytest.mark.parametrize(
    ("caller", "role", "namespace"),
    [
        ("client", "client", NS_A),
        ("worker", "worker", NS_A),
        ("admin", "admin", NS_A),
        ("root", "admin", ""),
    ],
)
async def test_server_info_names_the_calling_key(
    auth_server: AuthServer, keys: Keys, caller: str, role: str, namespace: str
) -> None:
    """What the web UI asks to know which actions to offer: the key's role and scope
    (never its secret), from the key the call presented."""
    secret = secret_of(keys, caller)
    assert secret is not None
    async with await Client.connect(auth_server.address, api_key=secret) as client:
        info = await client.call(
            client.worker_service.GetServerInfo, service_pb2.GetServerInfoRequest()
        )
    assert info.auth_required
    assert info.HasField("caller")
    assert (info.caller.role, info.caller.namespace) == (role, namespace)
    assert info.caller.key_id == secret.split("_")[1]
    assert secret not in str(info)
