"""Markers in the store (on every backend): a get_version marker takes seq 0 and needs an
id and a version payload, and a local activity marker's attempt log (details) is
recorded in its MarkerRecorded event."""

from __future__ import annotations

import pytest

from durable_rpc import converter
from durable_rpc.errors import InvalidArgumentError
from durable_rpc.store import Store
from durable_rpc.v1 import payload_pb2, workflow_task_pb2
from tests.store.helpers import NS, claim, events, history, start


def marker(seq: int, kind: str, marker_id: str, **payloads: bytes) -> workflow_task_pb2.Command:
    command = workflow_task_pb2.Command(
        seq=seq, record_marker=workflow_task_pb2.RecordMarker(kind=kind, id=marker_id)
    )
    for field, data in payloads.items():
        getattr(command.record_marker, field).CopyFrom(payload_pb2.Payload(data=data))
    return command


async def test_a_version_marker_is_recorded_with_its_version(store: Store) -> None:
    await start(store)
    task = await claim(store)
    await store.complete_workflow_task(
        NS,
        task.lease,
        len(task.events),
        [marker(0, "version", "ship", payload=converter.encode(2))],
    )
    recorded = events(await history(store))[-1].marker_recorded
    assert (recorded.seq, recorded.kind, recorded.id) == (0, "version", "ship")
    assert converter.decode(recorded.payload.data) == 2


@pytest.mark.parametrize(
    ("command", "match"),
    [
        (marker(1, "version", "ship", payload=converter.encode(1)), "takes no seq"),
        (marker(0, "version", "", payload=converter.encode(1)), "id is empty"),
        (marker(0, "version", "ship"), "carries no version payload"),
    ],
)
async def test_a_bad_version_marker_is_refused(
    store: Store, command: workflow_task_pb2.Command, match: str
) -> None:
    await start(store)
    task = await claim(store)
    with pytest.raises(InvalidArgumentError, match=match):
        await store.complete_workflow_task(NS, task.lease, len(task.events), [command])


async def test_a_local_activity_marker_keeps_its_attempt_log(store: Store) -> None:
    await start(store)
    task = await claim(store)
    log = [{"attempt": 1, "outcome": "failed"}, {"attempt": 2, "outcome": "completed"}]
    command = marker(
        1, "local_activity", "", payload=converter.encode("ok"), details=converter.encode(log)
    )
    await store.complete_workflow_task(NS, task.lease, len(task.events), [command])
    recorded = events(await history(store))[-1].marker_recorded
    assert converter.decode(recorded.details.data) == log
