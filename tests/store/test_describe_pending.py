"""Describe's pending activities say when a retry becomes claimable, when a running
attempt's lease runs out and what its last heartbeat reported (what the web UI's run
page and an operator in an incident need), on every backend."""

from __future__ import annotations

from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2
from tests.store.helpers import NS, activity_options, failure, payload
from tests.store.test_activities import claim_activity, scheduled

BACKOFF_MS = 60_000


async def test_pending_activities_carry_retry_time_lease_expiry_and_heartbeat(
    store: Store,
) -> None:
    await scheduled(
        store, activity_options(initial_ms=BACKOFF_MS, maximum_attempts=3, heartbeat_ms=5_000)
    )
    [queued] = (await store.describe(NS, "wf-1", None)).pending_activities
    assert queued.state == "queued"
    assert (queued.next_attempt_ms, queued.lease_expires_ms, queued.heartbeat_details) == (
        None,
        None,
        None,
    )

    first = await claim_activity(store)
    await store.heartbeat_activity_task(NS, first.lease, payload(b"row 41 of 100"))
    [leased] = (await store.describe(NS, "wf-1", None)).pending_activities
    assert leased.state == "leased" and leased.next_attempt_ms is None
    assert leased.lease_expires_ms is not None
    assert leased.lease_expires_ms >= first.lease_expires_at_ms  # the heartbeat extended it
    assert leased.heartbeat_details is not None
    assert payload_pb2.Payload.FromString(leased.heartbeat_details).data == b"row 41 of 100"

    before = await store.now_ms()
    assert await store.fail_activity_task(NS, first.lease, failure("try 1")) == BACKOFF_MS
    after = await store.now_ms()
    [waiting] = (await store.describe(NS, "wf-1", None)).pending_activities
    assert waiting.state == "waiting" and waiting.lease_expires_ms is None
    assert waiting.next_attempt_ms is not None
    assert before + BACKOFF_MS <= waiting.next_attempt_ms <= after + BACKOFF_MS
    # The retry resumes from the last details (activity.info().heartbeat_details).
    assert waiting.heartbeat_details is not None
    assert payload_pb2.Payload.FromString(waiting.heartbeat_details).data == b"row 41 of 100"
