//! Replay of workflow updates: accepted updates are re-delivered from their recorded
//! `update_accepted` events, and accept/complete commands are matched.

use super::test_support::{marker, numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    complete_update, update_completed, AcceptUpdate, ActivationCompletion, Command, CompleteUpdate,
    DoUpdateJob, History, Payload, SignalReceived, UpdateAccepted, UpdateCompleted,
    WorkflowStarted,
};

fn payload(data: &[u8]) -> Payload {
    Payload {
        data: data.to_vec(),
        external: None,
        metadata: Default::default(),
    }
}

fn history(events: Vec<Attributes>) -> History {
    numbered(events)
}

fn started() -> Attributes {
    Attributes::WorkflowStarted(WorkflowStarted {
        workflow_type: "order".into(),
        run_id: "run-1".into(),
        ..Default::default()
    })
}

fn accept(id: &str, name: &str) -> Command {
    Command {
        seq: 0,
        kind: Some(Kind::AcceptUpdate(AcceptUpdate {
            update_id: id.into(),
            update_name: name.into(),
            input: Some(payload(b"args")),
        })),
    }
}

fn complete(id: &str, failed: bool) -> Command {
    let outcome = if failed {
        complete_update::Outcome::Failure(Default::default())
    } else {
        complete_update::Outcome::Result(payload(b"r"))
    };
    Command {
        seq: 0,
        kind: Some(Kind::CompleteUpdate(CompleteUpdate {
            update_id: id.into(),
            outcome: Some(outcome),
        })),
    }
}

/// Task 1 (start) produced nothing; task 2 accepted and completed update "u1".
fn recorded() -> History {
    history(vec![
        started(),
        marker(1),
        Attributes::SignalReceived(SignalReceived {
            signal_name: "s".into(),
            ..Default::default()
        }),
        marker(3),
        Attributes::UpdateAccepted(UpdateAccepted {
            update_id: "u1".into(),
            update_name: "set".into(),
            input: Some(payload(b"args")),
        }),
        Attributes::UpdateCompleted(UpdateCompleted {
            update_id: "u1".into(),
            outcome: Some(update_completed::Outcome::Result(payload(b"r"))),
        }),
    ])
}

fn done(commands: Vec<Command>) -> ActivationCompletion {
    ActivationCompletion { commands }
}

#[test]
fn accepted_update_is_redelivered_after_the_task_inputs() {
    let mut m = ReplayMachine::new(recorded(), ts(200)).unwrap();
    let first = m.next_activation().unwrap().unwrap();
    assert_eq!(first.jobs.len(), 1);
    m.complete_activation(done(vec![])).unwrap();

    let second = m.next_activation().unwrap().unwrap();
    assert!(second.is_replaying);
    assert_eq!(second.jobs.len(), 2);
    assert!(matches!(second.jobs[0].job, Some(Job::SignalWorkflow(_))));
    let Some(Job::DoUpdate(update)) = &second.jobs[1].job else {
        panic!("expected an update job, got {:?}", second.jobs[1]);
    };
    assert_eq!(update.update_id, "u1");
    assert_eq!(update.update_name, "set");
    assert_eq!(update.input.as_ref().unwrap().data, b"args");
    assert!(!update.validate, "a recorded update is not validated again");
    assert_eq!(second.jobs[1].event_id, 5);
    m.complete_activation(done(vec![accept("u1", "set"), complete("u1", false)]))
        .unwrap();
    assert!(m.next_activation().unwrap().is_none());
    assert!(m.take_new_commands().is_empty());
}

#[test]
fn a_different_update_outcome_is_nondeterminism() {
    let mut m = ReplayMachine::new(recorded(), ts(200)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(done(vec![])).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(done(vec![accept("u1", "set"), complete("u1", true)]))
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "CompleteUpdate(id=\"u1\", result)");
    assert_eq!(e.actual, "CompleteUpdate(id=\"u1\", failure)");
}

#[test]
fn a_missing_acceptance_is_nondeterminism() {
    let mut m = ReplayMachine::new(recorded(), ts(200)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(done(vec![])).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m.complete_activation(done(vec![])).unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "AcceptUpdate(id=\"u1\", name=\"set\")");
    assert_eq!(e.actual, "nothing");
}

#[test]
fn pending_updates_make_a_final_activation_after_the_inputs() {
    let mut m = ReplayMachine::new(recorded(), ts(200)).unwrap();
    m.add_pending_update(DoUpdateJob {
        update_id: "u2".into(),
        update_name: "set".into(),
        input: Some(payload(b"x")),
        validate: true,
    });
    m.next_activation().unwrap().unwrap();
    m.complete_activation(done(vec![])).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(done(vec![accept("u1", "set"), complete("u1", false)]))
        .unwrap();
    // No undelivered input event, yet the pending update gets a live activation.
    let last = m.next_activation().unwrap().unwrap();
    assert!(!last.is_replaying);
    assert_eq!(last.timestamp, Some(ts(200)));
    assert_eq!(last.jobs.len(), 1);
    let Some(Job::DoUpdate(update)) = &last.jobs[0].job else {
        panic!("expected an update job");
    };
    assert!(update.validate);
    m.complete_activation(done(vec![accept("u2", "set")]))
        .unwrap();
    assert!(m.next_activation().unwrap().is_none());
    assert_eq!(m.take_new_commands(), vec![accept("u2", "set")]);
}

#[test]
fn an_update_event_before_any_marker_is_malformed() {
    let h = history(vec![
        started(),
        Attributes::UpdateAccepted(UpdateAccepted {
            update_id: "u1".into(),
            ..Default::default()
        }),
    ]);
    let err = ReplayMachine::new(h, ts(0)).unwrap_err();
    assert!(err.message.contains("update_accepted"), "{err}");
}
