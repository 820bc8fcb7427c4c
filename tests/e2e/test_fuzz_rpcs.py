"""Property-based fuzz of every unary RPC of every service of a real server process.

The RPCs are enumerated from the descriptors of every durable_rpc.v1 proto file (the
services the server lists through reflection): a new RPC is fuzzed without touching
this file. It runs twice: against a server without authentication, and against one with
``--auth`` called with the cluster admin key (every handler is reached, past the key
check). Each example sends every RPC one request, concurrently, over a real socket:
a message of random field values built from its descriptor (huge and control-character
strings, out-of-range numbers, unknown enum values, non-finite doubles, foreign bytes),
the serialization of one mutated at the byte level, or random bytes. No answer may be
INTERNAL or UNKNOWN, every error carries a stable reason and no server path, and the
server stays healthy with no traceback in its log.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import durable_rpc.v1
from durable_rpc import payload
from durable_rpc._rpc_status import reason_of
from durable_rpc.v1 import payload_pb2, service_pb2, session_service_pb2
from tests.e2e.conftest import ROOT, ServerProcess
from tests.security.conftest import AuthServer, bootstrap_admin_key

# Long polls answer "nothing" after the server's poll timeout; calls that wait longer
# (a result, an update, a query of the seeded run) end at this client deadline, which
# is fine: DEADLINE_EXCEEDED is the client's own status.
DEADLINE_S = 0.6
POLL_TIMEOUT_S = "0.3"
#: Examples per server mode: each sends every RPC one request. A longer local hunt:
#: DURABLE_RPC_FUZZ_EXAMPLES=1000.
EXAMPLES = int(os.environ.get("DURABLE_RPC_FUZZ_EXAMPLES", "30"))

# Every service of every durable_rpc.v1 proto file, and grpc's health service.
OUR_SERVICES = [
    service
    for module in pkgutil.iter_modules(durable_rpc.v1.__path__)
    if module.name.endswith("_pb2")
    for service in importlib.import_module(
        f"durable_rpc.v1.{module.name}"
    ).DESCRIPTOR.services_by_name.values()
]
SERVICES = [*OUR_SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"]]
METHODS: list[MethodDescriptor] = [
    method
    for service in SERVICES
    for method in service.methods
    # Server streams (BatchWorkflows) pass the same interceptor and are fuzzed alike.
    if not method.client_streaming
]

WORKFLOW_ID = "fuzz-wf"
QUEUE = "fuzz-q"
WORKER = "fuzz-worker"
WORDS = ["", "default", WORKFLOW_ID, QUEUE, WORKER, "Fuzz", "1", "x", "é", "status = 'running'"]
FRAMES = [payload.encode(None), payload.encode(["a", 1, 2.5, {"k": b"v"}])]


def _class(descriptor: Descriptor) -> type[Message]:
    return message_factory.GetMessageClass(descriptor)


#: Seconds at the ends of what the API accepts: the last second of year 9999 (the
#: latest Timestamp) and the longest Duration (10,000 years). A duration between the two
#: added to now no longer fits a Timestamp.
TIME_EDGES = (253_402_300_799, 315_576_000_000)


#: Durations the API accepts that no time from now on fits a Timestamp: often drawn for
#: a Duration field (a timeout, a lifetime, a TTL), where random seconds are rarely in
#: that window.
LONGEST_DURATIONS_OF = duration_pb2.Duration.DESCRIPTOR.full_name
LONGEST_DURATIONS = st.sampled_from(TIME_EDGES).map(lambda s: duration_pb2.Duration(seconds=s))


def _ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    edges = [v for v in (lo, hi, -1, 0, 1, 2, 2**31 - 1, 2**53, *TIME_EDGES) if lo <= v <= hi]
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


_INT_RANGES = {
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
}

# Plausible values (so a request gets past validation into the handler and the store)...
PLAIN_STRINGS = st.one_of(
    st.sampled_from(WORDS), st.text(alphabet="abcxyz-_.019", min_size=1, max_size=8)
)
PLAIN_BYTES = st.sampled_from([*FRAMES, b"1", b"2", b""])
PLAIN_IDENTIFIERS: dict[str, st.SearchStrategy[Any]] = {
    "namespace": st.sampled_from(["default", ""]),
    "workflow_id": st.sampled_from([WORKFLOW_ID, "fuzz-other"]),
    # Empty: the workflow's latest run (the fresh one each example starts).
    "run_id": st.just(""),
    "task_queue": st.just(QUEUE),
    "worker_id": st.just(WORKER),
    "workflow_type": st.just("Fuzz"),
    "name": st.just("Fuzz"),
    "workflow_version": st.just("1"),
    "version": st.just("1"),
    "fingerprint": st.just("f"),
    "signal_name": st.just("s"),
    "query_name": st.just("q"),
    "update_name": st.just("u"),
    "activity_type": st.just("x"),
}
# ...and hostile ones.
HOSTILE_STRINGS = st.one_of(
    PLAIN_STRINGS,
    st.text(max_size=12),
    st.sampled_from(["w" * 20_000, "é" * 600, "a\x00b", "line\nbreak", "\x7f"]),
)
HOSTILE_BYTES = st.one_of(
    st.sampled_from([*FRAMES, b"\xff\xfe", "١٢٣".encode(), b"9" * 40, b"-5", b"1", b""]),
    st.binary(max_size=40),
)


def _scalar(field: FieldDescriptor, hostile: bool) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return HOSTILE_STRINGS if hostile else PLAIN_STRINGS
    if kind == FieldDescriptor.TYPE_BYTES:
        return HOSTILE_BYTES if hostile else PLAIN_BYTES
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        if not hostile:
            return st.sampled_from([0.0, 1.0, 2.5])
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if kind == 1 else 32)
    if kind == FieldDescriptor.TYPE_ENUM:
        known = st.sampled_from([v.number for v in field.enum_type.values])
        return st.one_of(known, st.integers(-2, 99)) if hostile else known
    if not hostile:
        return st.integers(0, 3)
    lo, hi = _INT_RANGES[kind]
    return _ints(lo, hi)


def messages(descriptor: Descriptor, hostile: bool, depth: int = 0) -> st.SearchStrategy[Message]:
    """Random messages of ``descriptor``: each field unset or a random value."""
    if depth > 3:
        return st.just(_class(descriptor)())
    fields: dict[str, st.SearchStrategy[Any]] = {}
    present: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if not hostile and field.name in PLAIN_IDENTIFIERS:
            # Always set to a value naming the seeded run, queue, worker... so the
            # request reaches past "required" and NOT_FOUND into the handler.
            present[field.name] = PLAIN_IDENTIFIERS[field.name]
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            key = _scalar(field.message_type.fields_by_name["key"], hostile)
            value_field = field.message_type.fields_by_name["value"]
            value = _value(value_field, hostile, depth + 1)
            fields[field.name] = st.dictionaries(key, value, max_size=2)
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            fields[field.name] = st.lists(_value(field, hostile, depth + 1), max_size=2)
        else:
            fields[field.name] = _value(field, hostile, depth + 1)
    return st.fixed_dictionaries(
        present,
        optional=fields,  # type: ignore[arg-type]
    ).map(lambda values: _build(descriptor, values))


def _value(field: FieldDescriptor, hostile: bool, depth: int) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if field.message_type.full_name == payload_pb2.Payload.DESCRIPTOR.full_name:
            valid = st.sampled_from(FRAMES).map(lambda data: payload_pb2.Payload(data=data))
            return st.one_of(valid, messages(field.message_type, hostile, depth))
        if hostile and field.message_type.full_name == LONGEST_DURATIONS_OF:
            return st.one_of(LONGEST_DURATIONS, messages(field.message_type, hostile, depth))
        return st.deferred(lambda: messages(field.message_type, hostile, depth))
    return _scalar(field, hostile)


def one_bad(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """A plausible message of ``descriptor`` with one field (at any depth) hostile: what
    a validation that stops at the first bad field of a wholly random message misses."""
    if depth > 3 or not descriptor.fields:
        return messages(descriptor, hostile=True, depth=depth)
    return st.sampled_from(list(descriptor.fields)).flatmap(
        lambda field: st.tuples(
            messages(descriptor, hostile=False, depth=depth), _bad_value(field, depth + 1)
        ).map(lambda pair: _with(pair[0], field, pair[1]))
    )


def _bad_value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key = _scalar(field.message_type.fields_by_name["key"], hostile=True)
        value = _value(field.message_type.fields_by_name["value"], True, depth)
        return st.dictionaries(key, value, min_size=1, max_size=1)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        item: st.SearchStrategy[Any] = st.deferred(lambda: one_bad(field.message_type, depth))
        if field.message_type.full_name == LONGEST_DURATIONS_OF:
            item = st.one_of(LONGEST_DURATIONS, item)
    else:
        item = _scalar(field, hostile=True)
    if field.label == FieldDescriptor.LABEL_REPEATED:
        return st.lists(item, min_size=1, max_size=2)
    return item


def _with(message: Message, field: FieldDescriptor, value: Any) -> Message:
    message.ClearField(field.name)
    changed = _build(message.DESCRIPTOR, {field.name: value})
    message.MergeFrom(changed)
    return message


def _build(descriptor: Descriptor, values: dict[str, Any]) -> Message:
    message = _class(descriptor)()
    for name, value in values.items():
        field = descriptor.fields_by_name[name]
        target = getattr(message, name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.label == FieldDescriptor.LABEL_REPEATED:
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                for item in value:
                    target.add().CopyFrom(item)
            else:
                target.extend(value)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def _mutate(data: bytes, edits: list[tuple[int, int, str]]) -> bytes:
    out = bytearray(data)
    for position, byte, edit in edits:
        at = position % (len(out) + 1)
        if edit == "flip" and out:
            out[at % len(out)] ^= byte or 1
        elif edit == "cut":
            del out[at:]
        else:
            out[at:at] = bytes([byte])
    return bytes(out)


EDITS = st.lists(
    st.tuples(
        st.integers(0, 4096), st.integers(0, 255), st.sampled_from(["flip", "cut", "insert"])
    ),
    min_size=1,
    max_size=3,
)


def request_bytes(method: MethodDescriptor) -> st.SearchStrategy[bytes]:
    plain = messages(method.input_type, hostile=False)
    hostile = messages(method.input_type, hostile=True)
    return st.one_of(
        plain.map(lambda m: m.SerializeToString()),
        one_bad(method.input_type).map(lambda m: m.SerializeToString()),
        hostile.map(lambda m: m.SerializeToString()),
        st.tuples(plain, EDITS).map(lambda pair: _mutate(pair[0].SerializeToString(), pair[1])),
        st.binary(max_size=120),
    )


PATHS = {f"/{m.containing_service.full_name}/{m.name}": m for m in METHODS}
Metadata = tuple[tuple[str, str], ...]


def served_services(channel: grpc.Channel, metadata: Metadata) -> set[str]:
    """What the server lists through reflection: a service defined in the protos but not
    registered yet (work in progress) is not an RPC anyone can call."""
    info = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (reply,) = list(info(iter([request]), timeout=10, metadata=metadata))
    return {service.name for service in reply.list_services_response.service}


# grpc's own health service answers without our ErrorInfo; only ours must carry a reason.
OURS = tuple(f"/{s.full_name}/" for s in OUR_SERVICES)


def _server_paths(tmp_path: Path) -> list[str]:
    return [str(ROOT), str(tmp_path), sys.prefix, str(Path.home())]


@pytest.fixture(params=["open", "admin-key"])
def fuzz_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ServerProcess, Metadata]]:
    """A server and the metadata its calls carry: none without authentication, the
    cluster admin key (made offline, as an operator bootstraps one) with ``--auth``."""
    db = tmp_path / "durable.db"
    log = tmp_path / "server.log"
    if request.param == "open":
        proc = ServerProcess(db, log, "--poll-timeout", POLL_TIMEOUT_S)
        metadata: Metadata = ()
    else:
        root = bootstrap_admin_key(f"sqlite:///{db}")
        proc = AuthServer(db, log, "--poll-timeout", POLL_TIMEOUT_S)
        metadata = (("authorization", f"Bearer {root}"),)
    proc.start()
    yield proc, metadata
    proc.stop()


def _fresh_run(channel: grpc.Channel, metadata: Metadata) -> None:
    """A new open run of the seeded workflow id, nothing requested of it yet: one
    example's cancel or terminate must not leave the next one only "not running"
    answers (or a cancellation already requested) for the run's deeper paths."""
    terminate = channel.unary_unary(
        "/durable_rpc.v1.WorkflowService/TerminateWorkflow",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=service_pb2.TerminateWorkflowResponse.FromString,
    )
    start = channel.unary_unary(
        "/durable_rpc.v1.WorkflowService/StartWorkflow",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=service_pb2.StartWorkflowResponse.FromString,
    )
    calls: list[tuple[Any, Message]] = [
        (terminate, service_pb2.TerminateWorkflowRequest(workflow_id=WORKFLOW_ID)),
        (
            start,
            service_pb2.StartWorkflowRequest(
                workflow_id=WORKFLOW_ID, workflow_type="Fuzz", task_queue=QUEUE
            ),
        ),
    ]
    for call, request in calls:
        try:
            call(request, timeout=10, metadata=metadata)
        except grpc.RpcError as exc:
            # No open run to terminate; or earlier fuzzed calls made starts refused (an
            # admission policy, a removed definition...): the example runs without.
            assert exc.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), exc


def _seed(channel: grpc.Channel, metadata: Metadata) -> None:
    """A registered worker (with session slots), so mutations of real requests reach
    past NOT_FOUND into the handlers' deeper paths (each example gets a fresh run)."""
    register = channel.unary_unary(
        "/durable_rpc.v1.WorkerService/RegisterWorker",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=service_pb2.RegisterWorkerResponse.FromString,
    )
    register(
        service_pb2.RegisterWorkerRequest(
            worker_id=WORKER,
            task_queue=QUEUE,
            workflows=[service_pb2.WorkflowDefinition(name="Fuzz", version="1", fingerprint="f")],
            activities=["x"],
        ),
        timeout=10,
        metadata=metadata,
    )
    register_sessions = channel.unary_unary(
        "/durable_rpc.v1.WorkerSessionService/RegisterWorkerSessions",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=session_service_pb2.RegisterWorkerSessionsResponse.FromString,
    )
    register_sessions(
        session_service_pb2.RegisterWorkerSessionsRequest(
            worker_id=WORKER, max_concurrent_worker_sessions=1000
        ),
        timeout=10,
        metadata=metadata,
    )


def _drain(stream: Any) -> grpc.RpcError | None:
    """Reads a server stream to its end; the error it ended with, if any."""
    try:
        for _ in stream:
            pass
    except grpc.RpcError as exc:
        return exc
    return None


def test_every_rpc_answers_fuzzed_input_without_internal_errors(
    fuzz_server: tuple[ServerProcess, Metadata], tmp_path: Path
) -> None:
    server, metadata = fuzz_server
    answered: dict[str, set[grpc.StatusCode]] = {}
    examples: list[int] = []
    server_paths = _server_paths(tmp_path)
    with grpc.insecure_channel(server.address) as channel:
        _seed(channel, metadata)
        served = served_services(channel, metadata)
        assert {"durable_rpc.v1.WorkflowService", "durable_rpc.v1.WorkerService"} <= served
        stubs = {
            path: (channel.unary_stream if method.server_streaming else channel.unary_unary)(
                path, request_serializer=None, response_deserializer=None
            )
            for path, method in PATHS.items()
            if method.containing_service.full_name in served
        }

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            # No explain phase: its tracing makes a failing run take minutes.
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            report_multiple_bugs=False,
            suppress_health_check=[
                HealthCheck.function_scoped_fixture,
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
            ],
        )
        @given(st.fixed_dictionaries({path: request_bytes(PATHS[path]) for path in stubs}))
        def fuzz(requests: dict[str, bytes]) -> None:
            examples.append(1)
            _fresh_run(channel, metadata)
            # Every call is under way before any answer is read (a stream starts when
            # it is made), so an example takes one deadline at most.
            calls = {
                path: (stubs[path] if PATHS[path].server_streaming else stubs[path].future)(
                    raw, timeout=DEADLINE_S, metadata=metadata
                )
                for path, raw in requests.items()
            }
            errors = {
                path: _drain(call) if PATHS[path].server_streaming else call.exception()
                for path, call in calls.items()
            }
            for path, error in errors.items():
                code = grpc.StatusCode.OK if error is None else error.code()
                answered.setdefault(path, set()).add(code)
                if error is None or code == grpc.StatusCode.DEADLINE_EXCEEDED:
                    continue
                details = error.details() or ""
                # The admin key passes every key check: a refusal would leave the
                # handler behind it unfuzzed.
                assert not (metadata and code == grpc.StatusCode.UNAUTHENTICATED), (path, details)
                assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (
                    path,
                    code,
                    details,
                    requests[path],
                )
                if path.startswith(OURS):
                    assert reason_of(error) is not None, (path, code, details)
                for server_path in server_paths:
                    assert server_path not in details, (path, details)

        fuzz()
        assert len(examples) >= EXAMPLES
        # Every RPC answered at least once with its own status (not only our deadline).
        for path in stubs:
            assert answered.get(path, set()) - {grpc.StatusCode.DEADLINE_EXCEEDED}, path
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    log = server.log_path.read_text()
    assert "Traceback" not in log, log[-4000:]
    assert "unexpected error" not in log, log[-4000:]
