"""Namespaces as tenants, and leases bound to the key that claimed them (real server
process on SQLite and on PostgreSQL, real socket)."""

from __future__ import annotations

import pytest

from durable_rpc import Client, payload
from durable_rpc.errors import LeaseLostError, PermissionDeniedError, UnauthenticatedError
from durable_rpc.v1 import admin_service_pb2 as admin_pb
from durable_rpc.v1 import payload_pb2, service_pb2, workflow_task_pb2
from tests.security.conftest import NS_A, NS_B, AuthServer, Keys, make_key

pytestmark = [pytest.mark.timeout(120), pytest.mark.also_on_postgres]


def _result(value: object) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=1,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(
            result=payload_pb2.Payload(data=payload.encode(value))
        ),
    )


async def test_one_namespaces_keys_reach_nothing_of_another(
    auth_server: AuthServer, keys: Keys
) -> None:
    async with await Client.connect(auth_server.address, namespace=NS_A, api_key=keys.client) as a:
        secret = await a.start_workflow(
            "Payment", {"card": "4111 1111"}, id="pay-1", task_queue="q"
        )
        assert (await secret.describe()).info.status == "running"

    # team-b's client, aimed at team-a: refused for every read and write.
    async with await Client.connect(
        auth_server.address, namespace=NS_A, api_key=keys.client_b
    ) as intruder:
        handle = intruder.get_handle("pay-1")
        for attempt in (
            handle.describe(),
            handle.history(),
            handle.signal("poke"),
            handle.terminate("mine now"),
            intruder.list_workflows().__anext__(),
            intruder.count_workflows(),
        ):
            with pytest.raises(PermissionDeniedError):
                await attempt
    # In its own namespace, team-b sees nothing of team-a's.
    async with await Client.connect(
        auth_server.address, namespace=NS_B, api_key=keys.client_b
    ) as b:
        assert [r.workflow_id async for r in b.list_workflows()] == []
        assert (await b.count_workflows()).total == 0
    # team-b's worker can neither poll team-a's queue nor see its namespace.
    async with await Client.connect(auth_server.address, api_key=keys.worker_b) as worker_b:
        with pytest.raises(PermissionDeniedError):
            await worker_b.call(
                worker_b.worker_service.PollWorkflowTask,
                service_pb2.PollWorkflowTaskRequest(namespace=NS_A, task_queue="q", worker_id="w"),
            )
        listed = await worker_b.call(
            worker_b.admin_service.ListNamespaces, admin_pb.ListNamespacesRequest()
        )
        assert [n.name for n in listed.namespaces] == [NS_B]
    # The run is untouched: still running, not terminated by anyone.
    async with await Client.connect(auth_server.address, namespace=NS_A, api_key=keys.client) as a:
        described = await a.get_handle("pay-1").describe()
        assert described.info.status == "running"


async def test_another_worker_key_cannot_complete_a_lease_even_with_its_token(
    auth_server: AuthServer, keys: Keys
) -> None:
    async with await Client.connect(auth_server.address, namespace=NS_A, api_key=keys.client) as c:
        await c.start_workflow("Order", 1, id="order-1", task_queue="q")
    poll = service_pb2.PollWorkflowTaskRequest(namespace=NS_A, task_queue="q", worker_id="w1")
    async with (
        await Client.connect(auth_server.address, api_key=keys.worker) as owner,
        await Client.connect(auth_server.address, api_key=keys.worker_2) as thief,
    ):
        task = await owner.call(owner.worker_service.PollWorkflowTask, poll, timeout=10)
        assert task.task_id > 0
        lease = service_pb2.Lease(
            task_id=task.task_id, worker_id="w1", fencing_token=task.fencing_token
        )
        last = task.history_length

        def completion(value: object) -> service_pb2.CompleteWorkflowTaskRequest:
            return service_pb2.CompleteWorkflowTaskRequest(
                namespace=NS_A, lease=lease, last_seen_event_id=last, commands=[_result(value)]
            )

        # Same task id, same worker id, same token: but another key.
        with pytest.raises(LeaseLostError):
            await thief.call(thief.worker_service.CompleteWorkflowTask, completion("stolen"))
        with pytest.raises(LeaseLostError):
            await thief.call(
                thief.worker_service.FailWorkflowTask,
                service_pb2.FailWorkflowTaskRequest(namespace=NS_A, lease=lease),
            )
        await owner.call(owner.worker_service.CompleteWorkflowTask, completion("mine"))
    async with await Client.connect(auth_server.address, namespace=NS_A, api_key=keys.client) as c:
        assert await c.get_handle("order-1").result(timeout=10) == "mine"
        # The first worker's completion is what was recorded: one completion event.
        events = [e.WhichOneof("attributes") for e in await c.get_handle("order-1").history()]
        assert events.count("workflow_completed") == 1, events


async def test_revocation_holds_from_the_next_call(auth_server: AuthServer, keys: Keys) -> None:
    async with await Client.connect(auth_server.address, api_key=keys.root) as root:
        secret = await make_key(root, "client", NS_A, "short-lived")
        async with await Client.connect(
            auth_server.address, namespace=NS_A, api_key=secret
        ) as user:
            assert [r async for r in user.list_workflows()] == []
            await root.call(
                root.admin_service.RevokeApiKey,
                admin_pb.RevokeApiKeyRequest(key_id=secret.split("_")[1], namespace=NS_A),
            )
            with pytest.raises(UnauthenticatedError, match="revoked"):
                await user.list_workflows().__anext__()


def test_the_secret_never_reaches_a_log_or_a_listing(auth_server: AuthServer, keys: Keys) -> None:
    from tests.cli_process import checked, run_cli

    listing = checked(run_cli("token", "list", "--db", auth_server.db_url, "--json"))
    log = auth_server.log_path.read_text()
    for secret in (keys.root, keys.client, keys.worker, keys.admin):
        token = secret.split("_", 2)[2]
        assert token not in listing
        assert token not in log
    assert "created by key" in log  # admin actions are logged, with the actor's key id


async def test_an_offline_revocation_by_another_process_holds_within_a_probe(
    auth_server: AuthServer, keys: Keys
) -> None:
    """`token revoke --db` beside a running server: the server sees the other process's
    commit (SQLite: data_version; PostgreSQL: the key NOTIFY) and drops its cached keys."""
    import time

    from tests.cli_process import checked, run_cli_async

    async with await Client.connect(
        auth_server.address, namespace=NS_A, api_key=keys.client
    ) as user:
        assert [r async for r in user.list_workflows()] == []  # the key is cached now
        key_id = keys.client.split("_")[1]
        checked(
            await run_cli_async(
                "token", "revoke", key_id, "--namespace", NS_A, "--db", auth_server.db_url
            )
        )
        revoked_at = time.monotonic()
        while True:
            try:
                await user.list_workflows().__anext__()
            except StopAsyncIteration:
                pass
            except UnauthenticatedError:
                break
            assert time.monotonic() - revoked_at < 5, "the offline revocation never held"
        print(f"offline revocation held after {time.monotonic() - revoked_at:.3f} s")
