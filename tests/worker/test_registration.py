"""Registration rules: a name registered twice is refused locally, before any server.

The worker's client points at a port nothing listens on: a rule checked by asking the
server would surface as UNAVAILABLE instead of the typed error.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import grpc
import pytest

from durable_rpc import DuplicateRegistrationError, activity, workflow
from durable_rpc.v1 import service_pb2_grpc
from durable_rpc.worker import Worker

THIS_FILE = __file__


class DeadServerClient:
    """A WorkerClient whose channel leads nowhere (no server is running at all)."""

    def __init__(self, address: str) -> None:
        # A sync channel: nothing here may call it, and it needs no event loop.
        self._channel = grpc.insecure_channel(address)
        self._stub = service_pb2_grpc.WorkerServiceStub(self._channel)

    @property
    def namespace(self) -> str:
        return "default"

    @property
    def worker_service(self) -> service_pb2_grpc.WorkerServiceAsyncStub:
        return self._stub  # type: ignore[return-value]


@pytest.fixture
def dead_client() -> Iterator[DeadServerClient]:
    with socket.socket() as sock:  # a port that was free a moment ago and is closed now
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = DeadServerClient(f"127.0.0.1:{port}")
    yield client
    client._channel.close()


def _line_of(fn: object) -> str:
    code = fn.__code__  # type: ignore[attr-defined]
    return f"{code.co_filename}:{code.co_firstlineno}"


@activity.defn(name="charge")
async def charge(amount: int) -> int:
    return amount


@activity.defn(name="charge")
async def charge_again(amount: int) -> int:
    return amount + 1


@workflow.defn(name="Orders")
class Orders:
    @workflow.run
    async def run(self) -> None:
        return None

    @workflow.query
    def status(self) -> str:
        return "open"

    @workflow.update
    def rename(self, name: str) -> str:
        return name


@workflow.defn(name="Orders")
class OrdersAgain:
    @workflow.run
    async def run(self) -> None:
        return None


@workflow.defn(name="Invoices")
class Invoices:
    """The same query and update names as Orders: fine, they are scoped per type."""

    @workflow.run
    async def run(self) -> None:
        return None

    @workflow.query
    def status(self) -> str:
        return "paid"

    @workflow.update
    def rename(self, name: str) -> str:
        return name


def test_an_activity_name_twice_is_refused_with_both_locations(
    dead_client: DeadServerClient,
) -> None:
    with pytest.raises(DuplicateRegistrationError) as caught:
        Worker(dead_client, task_queue="q", activities=[charge, charge_again])
    error = caught.value
    assert (error.kind, error.name, error.scope) == ("activity", "charge", None)
    assert (error.first, error.second) == (_line_of(charge), _line_of(charge_again))
    assert error.first in str(error) and error.second in str(error)


def test_the_same_callback_twice_is_refused_too(dead_client: DeadServerClient) -> None:
    with pytest.raises(DuplicateRegistrationError) as caught:
        Worker(dead_client, task_queue="q", activities=[charge, charge])
    assert caught.value.first == caught.value.second == _line_of(charge)


def test_a_workflow_name_and_version_twice_is_refused(dead_client: DeadServerClient) -> None:
    with pytest.raises(DuplicateRegistrationError) as caught:
        Worker(dead_client, task_queue="q", workflows=[Orders, OrdersAgain])
    error = caught.value
    assert error.kind == "workflow" and error.scope is None
    assert error.name == "Orders (version 1)"
    assert error.first.startswith(f"{THIS_FILE}:") and error.second.startswith(f"{THIS_FILE}:")
    assert error.first != error.second


def test_query_and_update_names_are_scoped_per_workflow_type(
    dead_client: DeadServerClient,
) -> None:
    worker = Worker(dead_client, task_queue="q", workflows=[Orders, Invoices])
    worker.validate_registration()  # no error: two types may reuse a handler name
    assert {d.name for d in worker.workflow_definitions} == {"Orders", "Invoices"}


@pytest.mark.parametrize("kind", ["query", "update", "signal"])
def test_a_handler_name_twice_on_one_workflow_type_is_refused(kind: str) -> None:
    mark = {"query": workflow.query, "update": workflow.update, "signal": workflow.signal}[kind]

    def first(self: object) -> str:
        return "a"

    def second(self: object) -> str:
        return "b"

    namespace = {
        "run": workflow.run(_async_none),
        "first": mark(name="dup")(first),  # type: ignore[operator]
        "second": mark(name="dup")(second),  # type: ignore[operator]
    }
    with pytest.raises(DuplicateRegistrationError) as caught:
        workflow.defn(name="Carts")(type("Carts", (), namespace))
    error = caught.value
    assert (error.kind, error.name, error.scope) == (kind, "dup", "Carts")
    assert {error.first, error.second} == {_line_of(first), _line_of(second)}


async def _async_none(self: object) -> None:
    return None
