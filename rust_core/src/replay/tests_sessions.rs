//! Replay of activities routed to a worker session (`ActivityOptions.session`): the
//! session options are part of the ScheduleActivity identity.

use std::collections::HashMap;

use super::test_support::{numbered, ts};
use super::*;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, ActivityOptions, ActivityScheduled, Command, History, ScheduleActivity,
    SessionOptions, WorkflowStarted, WorkflowTaskCompleted,
};

fn session(id: &str, ttl: i64, requires: &[(&str, &str)]) -> Option<ActivityOptions> {
    Some(ActivityOptions {
        session: Some(SessionOptions {
            session_id: id.into(),
            lease_seconds: 10,
            ttl_seconds: ttl,
            max_concurrent_activities: 1,
            requires: requires
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<HashMap<_, _>>(),
        }),
        ..Default::default()
    })
}

fn history(options: Option<ActivityOptions>) -> History {
    numbered(vec![
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "render".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }),
        Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
            last_seen_event_id: 1,
            workflow_time: Some(ts(100)),
            ..Default::default()
        }),
        Attributes::ActivityScheduled(ActivityScheduled {
            seq: 1,
            activity_type: "gpu_step".into(),
            options,
            ..Default::default()
        }),
    ])
}

fn replay(
    recorded: Option<ActivityOptions>,
    produced: Option<ActivityOptions>,
) -> Result<(), ReplayError> {
    let mut m = ReplayMachine::new(history(recorded), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![Command {
            seq: 1,
            kind: Some(Kind::ScheduleActivity(ScheduleActivity {
                activity_type: "gpu_step".into(),
                options: produced,
                ..Default::default()
            })),
        }],
    })
}

#[test]
fn the_same_session_options_replay_in_any_map_order() {
    replay(
        session("s", 60, &[("gpu", "a100"), ("zone", "eu")]),
        session("s", 60, &[("zone", "eu"), ("gpu", "a100")]),
    )
    .expect("same options");
}

#[test]
fn a_changed_ttl_is_nondeterminism() {
    let err = replay(session("s", 60, &[]), session("s", 30, &[])).expect_err("diverges");
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.seq, 1);
    assert_eq!(
        e.expected,
        "ScheduleActivity(seq=1, type=\"gpu_step\", session(id=\"s\", lease=10s, ttl=60s, \
         max_concurrent_activities=1, requires={}))"
    );
    assert!(e.actual.contains("ttl=30s"), "{}", e.actual);
}

#[test]
fn dropping_the_session_is_nondeterminism() {
    let err = replay(session("s", 60, &[("gpu", "a100")]), None).expect_err("diverges");
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.actual, "ScheduleActivity(seq=1, type=\"gpu_step\")");
    assert!(
        e.expected.contains("requires={\"gpu\"=\"a100\"}"),
        "{}",
        e.expected
    );
}

#[test]
fn other_activity_options_are_not_part_of_the_identity() {
    let mut produced = session("s", 60, &[]);
    if let Some(o) = produced.as_mut() {
        o.priority = 2;
    }
    replay(session("s", 60, &[]), produced).expect("only the session is identity");
}
