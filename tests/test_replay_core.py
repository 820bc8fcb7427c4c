"""The Rust replay machine through its Python API (durable_rpc._core.ReplayMachine)."""

from __future__ import annotations

import pickle

import pytest
from google.protobuf.duration_pb2 import Duration

from durable_rpc._core import MalformedHistoryError, NondeterminismError, ReplayMachine
from durable_rpc.v1 import history_pb2, payload_pb2, workflow_task_pb2

RUN_ID = "run-1"
TASK_TIME_MS = 1_700_000_000_123


class History:
    """Builds a History message; event ids are assigned 1..N."""

    def __init__(self) -> None:
        self.msg = history_pb2.History()
        self.add(
            workflow_started=history_pb2.WorkflowStarted(
                workflow_type="order",
                workflow_version="1",
                workflow_id="wf-1",
                run_id=RUN_ID,
                input=payload_pb2.Payload(data=b"args"),
            )
        )

    def add(self, **attrs: object) -> History:
        event = self.msg.events.add(event_id=len(self.msg.events) + 1)
        ((field, value),) = attrs.items()
        getattr(event, field).CopyFrom(value)
        return self

    def task_done(self, time_s: int, last_seen: int | None = None) -> History:
        marker = history_pb2.WorkflowTaskCompleted(
            last_seen_event_id=len(self.msg.events) if last_seen is None else last_seen
        )
        marker.workflow_time.FromSeconds(time_s)
        return self.add(workflow_task_completed=marker)

    def scheduled(self, seq: int, activity_type: str) -> History:
        return self.add(
            activity_scheduled=history_pb2.ActivityScheduled(seq=seq, activity_type=activity_type)
        )

    def completed(self, seq: int, result: bytes) -> History:
        return self.add(
            activity_completed=history_pb2.ActivityCompleted(
                seq=seq, result=payload_pb2.Payload(data=result), attempt=1
            )
        )

    def signal(self, name: str) -> History:
        return self.add(signal_received=history_pb2.SignalReceived(signal_name=name))

    def timer_started(self, seq: int, seconds: int) -> History:
        return self.add(
            timer_started=history_pb2.TimerStarted(seq=seq, duration=Duration(seconds=seconds))
        )

    def timer_fired(self, seq: int) -> History:
        return self.add(timer_fired=history_pb2.TimerFired(seq=seq))

    def workflow_completed(self) -> History:
        return self.add(workflow_completed=history_pb2.WorkflowCompleted())

    def machine(self) -> ReplayMachine:
        return ReplayMachine(self.msg.SerializeToString(), TASK_TIME_MS)


def schedule(seq: int, activity_type: str) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        schedule_activity=workflow_task_pb2.ScheduleActivity(activity_type=activity_type),
    )


def start_timer(seq: int, seconds: int) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq, start_timer=workflow_task_pb2.StartTimer(duration=Duration(seconds=seconds))
    )


def complete(seq: int) -> workflow_task_pb2.Command:
    return workflow_task_pb2.Command(
        seq=seq,
        complete_workflow=workflow_task_pb2.CompleteWorkflow(
            result=payload_pb2.Payload(data=b"done")
        ),
    )


def completion(*commands: workflow_task_pb2.Command) -> bytes:
    return workflow_task_pb2.ActivationCompletion(commands=commands).SerializeToString()


def next_activation(m: ReplayMachine) -> workflow_task_pb2.Activation:
    data = m.next_activation()
    assert data is not None
    return workflow_task_pb2.Activation.FromString(data)


def two_activities() -> History:
    h = History()
    h.task_done(100).scheduled(1, "charge")
    h.completed(1, b"receipt").task_done(200).scheduled(2, "ship")
    return h.completed(2, b"tracking").task_done(300).workflow_completed()


def test_matching_replay_yields_no_new_commands() -> None:
    m = two_activities().machine()
    assert not m.is_replaying
    assert m.run_id == RUN_ID

    a1 = next_activation(m)
    assert a1.is_replaying and m.is_replaying
    assert a1.run_id == RUN_ID
    assert a1.timestamp.ToSeconds() == 100
    assert [j.event_id for j in a1.jobs] == [1]
    start = a1.jobs[0].start_workflow
    assert (start.workflow_type, start.run_id, start.input.data) == ("order", RUN_ID, b"args")
    m.complete_activation(completion(schedule(1, "charge")))

    a2 = next_activation(m)
    assert a2.timestamp.ToSeconds() == 200
    resolve = a2.jobs[0].resolve_activity
    assert a2.jobs[0].event_id == 4
    assert resolve.seq == 1
    assert resolve.WhichOneof("outcome") == "completed"
    assert resolve.completed.data == b"receipt"
    m.complete_activation(completion(schedule(2, "ship")))

    next_activation(m)
    m.complete_activation(completion(complete(3)))

    assert m.next_activation() is None
    assert workflow_task_pb2.ActivationCompletion.FromString(m.take_new_commands()).commands == []


def test_final_activation_commands_are_new() -> None:
    h = History()
    h.task_done(100).scheduled(1, "charge").completed(1, b"receipt")
    m = h.machine()
    next_activation(m)
    m.complete_activation(completion(schedule(1, "charge")))

    final = next_activation(m)
    assert not final.is_replaying and not m.is_replaying
    assert final.timestamp.ToMilliseconds() == TASK_TIME_MS
    assert [j.event_id for j in final.jobs] == [4]
    m.complete_activation(completion(schedule(2, "ship"), start_timer(3, 60)))
    assert m.next_activation() is None

    new = workflow_task_pb2.ActivationCompletion.FromString(m.take_new_commands())
    assert list(new.commands) == [schedule(2, "ship"), start_timer(3, 60)]
    assert workflow_task_pb2.ActivationCompletion.FromString(m.take_new_commands()).commands == []


def test_signal_arriving_mid_task_is_delivered_later() -> None:
    h = History().signal("approve")  # event 2, arrived while task 1 ran
    h.task_done(100, last_seen=1).scheduled(1, "charge")
    m = h.machine()
    assert [j.event_id for j in next_activation(m).jobs] == [1]
    m.complete_activation(completion(schedule(1, "charge")))
    final = next_activation(m)
    assert not final.is_replaying
    assert [j.event_id for j in final.jobs] == [2]
    assert [j.signal_workflow.signal_name for j in final.jobs] == ["approve"]


def test_timer_replays() -> None:
    h = History()
    h.task_done(100).timer_started(1, 30).timer_fired(1).task_done(130).workflow_completed()
    m = h.machine()
    next_activation(m)
    m.complete_activation(completion(start_timer(1, 30)))
    assert next_activation(m).jobs[0].fire_timer.seq == 1
    m.complete_activation(completion(complete(2)))
    assert m.next_activation() is None


def test_activity_type_divergence_raises_nondeterminism() -> None:
    m = two_activities().machine()
    next_activation(m)
    with pytest.raises(NondeterminismError) as info:
        m.complete_activation(completion(schedule(1, "refund")))
    err = info.value
    assert err.seq == 1
    assert err.expected == 'ScheduleActivity(seq=1, type="charge")'
    assert err.actual == 'ScheduleActivity(seq=1, type="refund")'
    assert str(err) == (
        'nondeterminism at seq 1: expected ScheduleActivity(seq=1, type="charge"), '
        'got ScheduleActivity(seq=1, type="refund")'
    )
    # The machine refuses to continue after nondeterminism.
    with pytest.raises(RuntimeError):
        m.next_activation()


def test_missing_and_extra_commands_raise_nondeterminism() -> None:
    m = two_activities().machine()
    next_activation(m)
    m.complete_activation(completion(schedule(1, "charge")))
    next_activation(m)
    with pytest.raises(NondeterminismError) as missing:
        m.complete_activation(completion())
    assert (missing.value.seq, missing.value.expected, missing.value.actual) == (
        2,
        'ScheduleActivity(seq=2, type="ship")',
        "nothing",
    )

    m = two_activities().machine()
    next_activation(m)
    with pytest.raises(NondeterminismError) as extra:
        m.complete_activation(completion(schedule(1, "charge"), start_timer(2, 5)))
    assert (extra.value.seq, extra.value.expected, extra.value.actual) == (
        2,
        "nothing",
        "StartTimer(seq=2, duration=5s)",
    )


def test_nondeterminism_error_is_constructible_and_picklable() -> None:
    err = NondeterminismError(3, "X", "Y")
    assert isinstance(err, Exception)
    assert (err.seq, err.expected, err.actual) == (3, "X", "Y")
    assert str(err) == "nondeterminism at seq 3: expected X, got Y"
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.seq, copy.expected, copy.actual) == (3, "X", "Y")


def test_malformed_histories_raise_structured_errors() -> None:
    with pytest.raises(MalformedHistoryError) as info:
        ReplayMachine(b"\xff\xff\xff", 0)
    assert "invalid History protobuf" in info.value.message
    assert isinstance(info.value, ValueError)

    with pytest.raises(MalformedHistoryError, match="empty"):
        ReplayMachine(b"", 0)

    orphan = History().scheduled(1, "charge")
    with pytest.raises(MalformedHistoryError, match="not preceded by a workflow_task_completed"):
        orphan.machine()

    future = History().task_done(100, last_seen=7)
    with pytest.raises(MalformedHistoryError, match="last_seen_event_id 7"):
        future.machine()

    no_start = history_pb2.History()
    no_start.events.add(event_id=1, signal_received=history_pb2.SignalReceived())
    with pytest.raises(MalformedHistoryError, match="event 1 must be workflow_started"):
        ReplayMachine(no_start.SerializeToString(), 0)


def test_usage_errors() -> None:
    m = two_activities().machine()
    with pytest.raises(RuntimeError):
        m.complete_activation(completion())
    next_activation(m)
    with pytest.raises(RuntimeError):
        m.next_activation()
    with pytest.raises(ValueError, match="invalid ActivationCompletion"):
        m.complete_activation(b"\xff\xff")
    with pytest.raises(ValueError, match="no kind"):
        m.complete_activation(completion(workflow_task_pb2.Command(seq=1)))
    # The activation is still outstanding and can be completed.
    m.complete_activation(completion(schedule(1, "charge")))
