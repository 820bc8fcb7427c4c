//! Replay of activity cancellation: `RequestCancelActivity` commands are matched against
//! recorded `activity_cancel_requested` events, and `activity_cancelled` input events
//! resolve the activity as cancelled.

use super::test_support::{marker, numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, ActivityCancelRequested, ActivityCancelled, ActivityScheduled, Command,
    History, RequestCancelActivity, ScheduleActivity, StartTimer, TimerFired, TimerStarted,
    WorkflowStarted,
};

fn history(events: Vec<Attributes>) -> History {
    numbered(events)
}

fn schedule(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::ScheduleActivity(ScheduleActivity {
            activity_type: "slow".into(),
            ..Default::default()
        })),
    }
}

fn timer(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::StartTimer(StartTimer {
            duration: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        })),
    }
}

fn cancel(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::RequestCancelActivity(RequestCancelActivity {
            activity_seq: seq,
        })),
    }
}

fn done(commands: Vec<Command>) -> ActivationCompletion {
    ActivationCompletion { commands }
}

/// Task 1 raced activity 1 against timer 2; task 2 (the timer won) cancelled activity
/// 1, which was then cancelled (event 8).
fn recorded() -> History {
    history(vec![
        Attributes::WorkflowStarted(WorkflowStarted {
            run_id: "run-1".into(),
            ..Default::default()
        }),
        marker(1),
        Attributes::ActivityScheduled(ActivityScheduled {
            seq: 1,
            activity_type: "slow".into(),
            ..Default::default()
        }),
        Attributes::TimerStarted(TimerStarted {
            seq: 2,
            duration: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        }),
        Attributes::TimerFired(TimerFired { seq: 2 }),
        marker(5),
        Attributes::ActivityCancelRequested(ActivityCancelRequested { seq: 1 }),
        Attributes::ActivityCancelled(ActivityCancelled { seq: 1, attempt: 0 }),
    ])
}

#[test]
fn cancel_request_replays_and_cancellation_resolves_the_activity() {
    let mut m = ReplayMachine::new(recorded(), ts(200)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(done(vec![schedule(1), timer(2)]))
        .unwrap();
    let second = m.next_activation().unwrap().unwrap();
    assert!(second.is_replaying);
    m.complete_activation(done(vec![cancel(1)])).unwrap();

    let last = m.next_activation().unwrap().unwrap();
    assert!(!last.is_replaying);
    assert_eq!(last.jobs.len(), 1);
    assert_eq!(last.jobs[0].event_id, 8);
    let Some(Job::ResolveActivity(resolve)) = &last.jobs[0].job else {
        panic!("expected a resolve_activity job, got {:?}", last.jobs[0]);
    };
    assert_eq!(resolve.seq, 1);
    assert!(resolve.cancelled);
    assert!(resolve.outcome.is_none());
}

#[test]
fn a_missing_cancel_request_is_nondeterminism() {
    let mut m = ReplayMachine::new(recorded(), ts(200)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(done(vec![schedule(1), timer(2)]))
        .unwrap();
    m.next_activation().unwrap().unwrap();
    let Err(ReplayError::Nondeterminism(e)) = m.complete_activation(done(vec![])) else {
        panic!("expected nondeterminism");
    };
    assert_eq!(e.seq, 1);
    assert_eq!(e.expected, "RequestCancelActivity(activity_seq=1)");
    assert_eq!(e.actual, "nothing");
}

#[test]
fn cancelling_a_different_activity_is_nondeterminism() {
    let mut m = ReplayMachine::new(recorded(), ts(200)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(done(vec![schedule(1), timer(2)]))
        .unwrap();
    m.next_activation().unwrap().unwrap();
    let Err(ReplayError::Nondeterminism(e)) = m.complete_activation(done(vec![cancel(2)])) else {
        panic!("expected nondeterminism");
    };
    assert_eq!(e.expected, "RequestCancelActivity(activity_seq=1)");
    assert_eq!(e.actual, "RequestCancelActivity(activity_seq=2)");
}
