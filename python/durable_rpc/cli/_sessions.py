"""``durable-rpc session describe SESSION_ID`` and ``durable-rpc session list QUEUE``:
worker sessions as the server holds them (WorkerSessionService.DescribeWorkerSession /
ListWorkerSessions; a client or worker key of the namespace in ``DURABLE_RPC_API_KEY``).
Times are the database's; ``lost`` is a holder whose lease lapsed."""

from __future__ import annotations

import click

from durable_rpc.cli._admin import _call, _print, _time, address_option, json_option
from durable_rpc.v1 import session_service_pb2 as pb
from durable_rpc.v1 import session_service_pb2_grpc

namespace_option = click.option(
    "--namespace", default="default", show_default=True, help="Namespace of the session."
)
_HEADERS = [
    "session",
    "queue",
    "state",
    "holder",
    "generation",
    "lease ends",
    "ttl ends",
    "reacquired",
    "requires",
    "closed because",
]


def _rows(sessions: list[pb.WorkerSession]) -> list[list[str]]:
    return [
        [
            s.session_id,
            s.task_queue,
            s.state,
            s.holder_worker_id or "-",
            str(s.generation),
            _time(s.lease_expires_at, s.HasField("lease_expires_at")),
            _time(s.ttl_expires_at, s.HasField("ttl_expires_at")),
            str(s.reacquisitions),
            ", ".join(f"{k}={v}" for k, v in sorted(s.options.requires.items())) or "-",
            s.close_reason or "-",
        ]
        for s in sessions
    ]


@click.group("session")
def session() -> None:
    """Worker sessions: which worker holds each, its lease and TTL, why it closed."""


@session.command("describe")
@click.argument("session_id")
@namespace_option
@address_option
@json_option
def session_describe(session_id: str, namespace: str, address: str, as_json: bool) -> None:
    """Show worker session SESSION_ID (a run's own session is run:RUN_ID)."""
    request = pb.DescribeWorkerSessionRequest(namespace=namespace, session_id=session_id)
    reply: pb.WorkerSessionResponse = _call(
        address,
        lambda c: c.call(
            session_service_pb2_grpc.WorkerSessionServiceStub(c.channel).DescribeWorkerSession,
            request,
        ),
    )
    # One session: a field per line, which fits any terminal.
    fields = [
        [name, value] for name, value in zip(_HEADERS, _rows([reply.session])[0], strict=True)
    ]
    fields.append(
        ["created", _time(reply.session.created_at, reply.session.HasField("created_at"))]
    )
    _print(reply, as_json, fields, ["field", "value"])


@session.command("list")
@click.argument("queue")
@click.option(
    "--limit", default=100, show_default=True, type=click.IntRange(1, 1000), help="At most."
)
@namespace_option
@address_option
@json_option
def session_list(queue: str, limit: int, namespace: str, address: str, as_json: bool) -> None:
    """The open (pending, active, lost) worker sessions of task queue QUEUE, by id."""
    request = pb.ListWorkerSessionsRequest(namespace=namespace, task_queue=queue, page_size=limit)
    reply: pb.ListWorkerSessionsResponse = _call(
        address,
        lambda c: c.call(
            session_service_pb2_grpc.WorkerSessionServiceStub(c.channel).ListWorkerSessions,
            request,
        ),
    )
    _print(reply, as_json, _rows(list(reply.sessions)), _HEADERS)
    if reply.next_page_token and not as_json:
        click.echo(f"(more than {limit}: pass a larger --limit)")
