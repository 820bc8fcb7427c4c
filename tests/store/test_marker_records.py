"""Markers in the store (on every backend): a get_version marker takes seq 0 and needs an
id and a version payload, and a local activity marker's attempt log (details) is
recorded in its MarkerRecorded event; parallel-group, selection and selection-winner
markers (workflow.parallel / workflow.selection) need a seq and a payload, a winner
the selection's seq as its id."""

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


async def test_group_and_selection_winner_markers_are_recorded(store: Store) -> None:
    await start(store)
    task = await claim(store)
    keys = {"keys": ["fast", "slow"], "parent": 0, "key": None}
    commands = [
        marker(1, "parallel", "", payload=converter.encode({**keys, "keys": [0, 1]})),
        marker(2, "selection", "", payload=converter.encode(keys)),
        marker(3, "selection_winner", "2", payload=converter.encode("fast")),
    ]
    await store.complete_workflow_task(NS, task.lease, len(task.events), commands)
    recorded = [e.marker_recorded for e in events(await history(store))[-3:]]
    assert [(m.seq, m.kind, m.id) for m in recorded] == [
        (1, "parallel", ""),
        (2, "selection", ""),
        (3, "selection_winner", "2"),
    ]
    assert converter.decode(recorded[2].payload.data) == "fast"


@pytest.mark.parametrize(
    ("command", "match"),
    [
        (marker(1, "parallel", ""), "parallel marker carries no payload"),
        (marker(1, "selection", ""), "selection marker carries no payload"),
        (marker(1, "selection_winner", "1"), "selection_winner marker carries no payload"),
        (
            marker(2, "selection_winner", "", payload=converter.encode("a")),
            "id must be the selection's seq",
        ),
        (marker(0, "parallel", "", payload=converter.encode({})), "seq must be > 0"),
    ],
)
async def test_a_bad_group_marker_is_refused(
    store: Store, command: workflow_task_pb2.Command, match: str
) -> None:
    await start(store)
    task = await claim(store)
    with pytest.raises(InvalidArgumentError, match=match):
        await store.complete_workflow_task(NS, task.lease, len(task.events), [command])
