//! Replay of side-effect and patch (version) markers.

use prost_types::Timestamp;

use super::*;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    Activation, ActivationCompletion, ActivityCompleted, ActivityScheduled, Command,
    CompleteWorkflow, History, HistoryEvent, MarkerRecorded, Payload, RecordMarker,
    ScheduleActivity, WorkflowCompleted, WorkflowStarted, WorkflowTaskCompleted,
};

fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

fn payload(bytes: &[u8]) -> Payload {
    Payload {
        data: bytes.to_vec(),
        external: None,
        metadata: Default::default(),
    }
}

/// Builds a history event by event; ids are assigned 1..N.
struct Builder(Vec<HistoryEvent>);

impl Builder {
    fn started() -> Self {
        let mut b = Builder(Vec::new());
        b.push(Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "order".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }));
        b
    }

    fn push(&mut self, attrs: Attributes) -> &mut Self {
        let id = self.0.len() as i64 + 1;
        self.0.push(HistoryEvent {
            event_id: id,
            event_time: Some(ts(1000 + id)),
            attributes: Some(attrs),
        });
        self
    }

    fn task_done(&mut self) -> &mut Self {
        let last_seen = self.0.len() as i64;
        self.push(Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
            last_seen_event_id: last_seen,
            workflow_time: Some(ts(100 + last_seen)),
            ..Default::default()
        }))
    }

    fn side_effect(&mut self, seq: i64, value: &[u8]) -> &mut Self {
        self.push(Attributes::MarkerRecorded(MarkerRecorded {
            seq,
            kind: "side_effect".into(),
            id: String::new(),
            payload: Some(payload(value)),
            details: None,
        }))
    }

    fn patch(&mut self, id: &str) -> &mut Self {
        self.push(Attributes::MarkerRecorded(MarkerRecorded {
            seq: 0,
            kind: "patch".into(),
            id: id.into(),
            payload: None,
            details: None,
        }))
    }

    fn scheduled(&mut self, seq: i64, activity_type: &str) -> &mut Self {
        self.push(Attributes::ActivityScheduled(ActivityScheduled {
            seq,
            activity_type: activity_type.into(),
            ..Default::default()
        }))
    }

    fn completed(&mut self, seq: i64) -> &mut Self {
        self.push(Attributes::ActivityCompleted(ActivityCompleted {
            seq,
            result: Some(payload(b"ok")),
            attempt: 1,
            ..Default::default()
        }))
    }

    fn workflow_completed(&mut self) -> &mut Self {
        self.push(Attributes::WorkflowCompleted(WorkflowCompleted {
            result: None,
        }))
    }

    fn machine(&self) -> ReplayMachine {
        ReplayMachine::new(
            History {
                events: self.0.clone(),
            },
            ts(9999),
        )
        .expect("well-formed")
    }
}

fn side_effect_cmd(seq: i64, value: &[u8]) -> Command {
    Command {
        seq,
        kind: Some(Kind::RecordMarker(RecordMarker {
            kind: "side_effect".into(),
            id: String::new(),
            payload: Some(payload(value)),
            details: None,
        })),
    }
}

fn patch_cmd(id: &str) -> Command {
    Command {
        seq: 0,
        kind: Some(Kind::RecordMarker(RecordMarker {
            kind: "patch".into(),
            id: id.into(),
            payload: None,
            details: None,
        })),
    }
}

fn schedule(seq: i64, activity_type: &str) -> Command {
    Command {
        seq,
        kind: Some(Kind::ScheduleActivity(ScheduleActivity {
            activity_type: activity_type.into(),
            ..Default::default()
        })),
    }
}

fn complete() -> Command {
    Command {
        seq: 0,
        kind: Some(Kind::CompleteWorkflow(CompleteWorkflow { result: None })),
    }
}

fn next(m: &mut ReplayMachine) -> Activation {
    m.next_activation()
        .expect("no usage error")
        .expect("an activation")
}

fn complete_with(m: &mut ReplayMachine, commands: Vec<Command>) -> Result<(), ReplayError> {
    m.complete_activation(ActivationCompletion { commands })
}

fn nondeterminism(err: ReplayError) -> NondeterminismError {
    match err {
        ReplayError::Nondeterminism(e) => e,
        other => panic!("expected nondeterminism, got {other:?}"),
    }
}

/// 1 started, 2 marker, 3 side_effect(1), 4 patch("v2"), 5 sched(2, charge),
/// 6 completed(2), 7 marker, 8 side_effect(3), 9 workflow_completed.
fn markers_history() -> Builder {
    let mut b = Builder::started();
    b.task_done()
        .side_effect(1, b"first")
        .patch("v2")
        .scheduled(2, "charge");
    b.completed(2)
        .task_done()
        .side_effect(3, b"second")
        .workflow_completed();
    b
}

#[test]
fn replayed_activations_carry_their_tasks_markers() {
    let mut m = markers_history().machine();

    let first = next(&mut m);
    assert!(first.is_replaying);
    let kinds: Vec<(i64, &str, &str)> = first
        .markers
        .iter()
        .map(|mk| (mk.seq, mk.kind.as_str(), mk.id.as_str()))
        .collect();
    assert_eq!(kinds, vec![(1, "side_effect", ""), (0, "patch", "v2")]);
    assert_eq!(first.markers[0].payload, Some(payload(b"first")));
    complete_with(
        &mut m,
        vec![
            side_effect_cmd(1, b"first"),
            patch_cmd("v2"),
            schedule(2, "charge"),
        ],
    )
    .expect("matches");

    let second = next(&mut m);
    assert_eq!(second.markers.len(), 1);
    assert_eq!(second.markers[0].seq, 3);
    assert_eq!(second.markers[0].payload, Some(payload(b"second")));
    complete_with(&mut m, vec![side_effect_cmd(3, b"second"), complete()]).expect("matches");
    assert!(m.next_activation().expect("ok").is_none());
}

#[test]
fn the_final_activation_carries_no_markers() {
    let mut b = Builder::started();
    b.task_done().side_effect(1, b"v").scheduled(2, "charge");
    b.completed(2);
    let mut m = b.machine();
    next(&mut m);
    complete_with(
        &mut m,
        vec![side_effect_cmd(1, b"v"), schedule(2, "charge")],
    )
    .expect("ok");
    let last = next(&mut m);
    assert!(!last.is_replaying);
    assert!(last.markers.is_empty());
    complete_with(&mut m, vec![side_effect_cmd(3, b"new"), complete()]).expect("new");
    assert_eq!(m.take_new_commands().len(), 2);
}

#[test]
fn the_side_effect_value_is_not_part_of_the_identity() {
    // The runtime returns the recorded value; what it sends back is only matched by
    // kind, seq and id.
    let mut m = markers_history().machine();
    next(&mut m);
    complete_with(
        &mut m,
        vec![
            side_effect_cmd(1, b""),
            patch_cmd("v2"),
            schedule(2, "charge"),
        ],
    )
    .expect("matches");
}

#[test]
fn a_side_effect_where_an_activity_was_recorded_is_nondeterminism() {
    let mut b = Builder::started();
    b.task_done().scheduled(1, "charge");
    let mut m = b.machine();
    next(&mut m);
    let err = nondeterminism(
        complete_with(&mut m, vec![side_effect_cmd(1, b"x")]).expect_err("diverges"),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "ScheduleActivity(seq=1, type=\"charge\")");
    assert_eq!(err.actual, "SideEffect(seq=1)");
}

#[test]
fn a_reordered_side_effect_is_nondeterminism() {
    let mut m = markers_history().machine();
    next(&mut m);
    let err = nondeterminism(
        complete_with(
            &mut m,
            vec![
                schedule(1, "charge"),
                side_effect_cmd(2, b"first"),
                patch_cmd("v2"),
            ],
        )
        .expect_err("diverges"),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "SideEffect(seq=1)");
    assert_eq!(err.actual, "ScheduleActivity(seq=1, type=\"charge\")");
    assert_eq!(
        err.to_string(),
        "nondeterminism at seq 1: expected SideEffect(seq=1), got \
         ScheduleActivity(seq=1, type=\"charge\")"
    );
}

#[test]
fn a_recorded_side_effect_the_code_no_longer_reaches_is_nondeterminism() {
    let mut b = Builder::started();
    b.task_done().side_effect(1, b"v").scheduled(2, "charge");
    let mut m = b.machine();
    next(&mut m);
    let err =
        nondeterminism(complete_with(&mut m, vec![schedule(2, "charge")]).expect_err("diverges"));
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "SideEffect(seq=1)");
    assert_eq!(err.actual, "ScheduleActivity(seq=2, type=\"charge\")");
}

#[test]
fn an_extra_side_effect_is_nondeterminism() {
    let mut b = Builder::started();
    b.task_done().scheduled(1, "charge");
    let mut m = b.machine();
    next(&mut m);
    let err = nondeterminism(
        complete_with(
            &mut m,
            vec![schedule(1, "charge"), side_effect_cmd(2, b"x")],
        )
        .expect_err("diverges"),
    );
    assert_eq!(err.seq, 2);
    assert_eq!(err.expected, "nothing");
    assert_eq!(err.actual, "SideEffect(seq=2)");
}

#[test]
fn an_old_history_without_the_patch_replays_when_the_code_takes_the_old_branch() {
    // Recorded before the patched() call existed: the runtime emits nothing for it
    // (the change id is not among the task's markers) and later seqs are unchanged.
    let mut b = Builder::started();
    b.task_done().scheduled(1, "old_charge");
    let mut m = b.machine();
    let a = next(&mut m);
    assert!(a.markers.is_empty());
    complete_with(&mut m, vec![schedule(1, "old_charge")]).expect("old branch matches");
}

#[test]
fn a_produced_patch_the_task_did_not_record_is_nondeterminism() {
    let mut b = Builder::started();
    b.task_done().scheduled(1, "charge");
    let mut m = b.machine();
    next(&mut m);
    let err = nondeterminism(
        complete_with(&mut m, vec![patch_cmd("v2"), schedule(1, "charge")]).expect_err("diverges"),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "ScheduleActivity(seq=1, type=\"charge\")");
    assert_eq!(err.actual, "Patch(id=\"v2\")");
}

#[test]
fn a_recorded_patch_the_code_no_longer_produces_is_skipped() {
    // deprecate_patch("v2") was deleted from the code: histories recorded with the
    // marker still replay.
    let mut m = markers_history().machine();
    next(&mut m);
    complete_with(
        &mut m,
        vec![side_effect_cmd(1, b"first"), schedule(2, "charge")],
    )
    .expect("the patch marker is skipped");
    next(&mut m);
    complete_with(&mut m, vec![side_effect_cmd(3, b"second"), complete()]).expect("matches");
}

#[test]
fn patches_in_a_different_order_are_nondeterminism() {
    let mut b = Builder::started();
    b.task_done().patch("a").patch("b").scheduled(1, "charge");
    let mut m = b.machine();
    next(&mut m);
    let err = nondeterminism(
        complete_with(
            &mut m,
            vec![patch_cmd("b"), patch_cmd("a"), schedule(1, "charge")],
        )
        .expect_err("diverges"),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "ScheduleActivity(seq=1, type=\"charge\")");
    assert_eq!(err.actual, "Patch(id=\"a\")");
}

#[test]
fn a_marker_event_must_follow_a_task_marker() {
    let mut b = Builder::started();
    b.side_effect(1, b"x");
    let err = ReplayMachine::new(
        History {
            events: b.0.clone(),
        },
        ts(0),
    )
    .expect_err("malformed");
    assert!(err.message.contains("marker_recorded"), "{}", err.message);
}

fn version_marker(b: &mut Builder, id: &str, version: &[u8]) {
    b.push(Attributes::MarkerRecorded(MarkerRecorded {
        seq: 0,
        kind: "version".into(),
        id: id.into(),
        payload: Some(payload(version)),
        details: None,
    }));
}

fn version_cmd(id: &str, version: &[u8]) -> Command {
    Command {
        seq: 0,
        kind: Some(Kind::RecordMarker(RecordMarker {
            kind: "version".into(),
            id: id.into(),
            payload: Some(payload(version)),
            details: None,
        })),
    }
}

#[test]
fn a_version_marker_replays_with_its_payload_and_matches_by_id() {
    let mut b = Builder::started();
    b.task_done();
    version_marker(&mut b, "ship", b"v1");
    b.scheduled(1, "ship_v2");
    let mut m = b.machine();
    let a = next(&mut m);
    assert_eq!(a.markers.len(), 1);
    assert_eq!(
        (
            a.markers[0].seq,
            a.markers[0].kind.as_str(),
            a.markers[0].id.as_str()
        ),
        (0, "version", "ship")
    );
    assert_eq!(a.markers[0].payload, Some(payload(b"v1")));
    complete_with(
        &mut m,
        vec![version_cmd("ship", b"v1"), schedule(1, "ship_v2")],
    )
    .expect("matches");
}

#[test]
fn a_recorded_version_the_code_no_longer_asks_for_is_skipped() {
    // Every open run settled on one version and the get_version() call was deleted.
    let mut b = Builder::started();
    b.task_done();
    version_marker(&mut b, "ship", b"v2");
    b.scheduled(1, "ship_v3");
    let mut m = b.machine();
    next(&mut m);
    complete_with(&mut m, vec![schedule(1, "ship_v3")]).expect("the version marker is skipped");
}

#[test]
fn a_produced_version_the_task_did_not_record_is_nondeterminism() {
    let mut b = Builder::started();
    b.task_done().scheduled(1, "ship_v1");
    let mut m = b.machine();
    next(&mut m);
    let err = nondeterminism(
        complete_with(
            &mut m,
            vec![version_cmd("ship", b"v1"), schedule(1, "ship_v1")],
        )
        .expect_err("diverges"),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "ScheduleActivity(seq=1, type=\"ship_v1\")");
    assert_eq!(err.actual, "Version(id=\"ship\")");
}
