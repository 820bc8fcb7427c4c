//! Replay of continue-as-new.

use super::test_support::{numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, Command, CompleteWorkflow, ContinueAsNew, History, Payload,
    WorkflowContinuedAsNew, WorkflowStarted, WorkflowTaskCompleted,
};

fn history() -> History {
    let events = [
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "counter".into(),
            run_id: "run-2".into(),
            continued_from_run_id: "run-1".into(),
            ..Default::default()
        }),
        Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
            last_seen_event_id: 1,
            workflow_time: Some(ts(100)),
            ..Default::default()
        }),
        Attributes::WorkflowContinuedAsNew(WorkflowContinuedAsNew {
            new_run_id: "run-3".into(),
            input: Some(Payload {
                data: b"[3]".to_vec(),
                external: None,
                metadata: Default::default(),
            }),
            ..Default::default()
        }),
    ];
    numbered(events.into())
}

fn continue_as_new(data: &[u8]) -> Command {
    Command {
        seq: 0,
        kind: Some(Kind::ContinueAsNew(ContinueAsNew {
            input: Some(Payload {
                data: data.to_vec(),
                external: None,
                metadata: Default::default(),
            }),
            ..Default::default()
        })),
    }
}

#[test]
fn start_job_names_the_run_it_continues() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    let a = m.next_activation().unwrap().unwrap();
    let Some(Job::StartWorkflow(start)) = &a.jobs[0].job else {
        panic!("expected a start job");
    };
    assert_eq!(start.continued_from_run_id, "run-1");
}

#[test]
fn continue_as_new_replays_and_the_input_is_not_identity() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![continue_as_new(b"[4]")],
    })
    .unwrap();
    assert!(m.next_activation().unwrap().is_none());
    assert!(m.take_new_commands().is_empty());
}

#[test]
fn completing_instead_of_continuing_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![Command {
                seq: 0,
                kind: Some(Kind::CompleteWorkflow(CompleteWorkflow::default())),
            }],
        })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "ContinueAsNew");
    assert_eq!(e.actual, "CompleteWorkflow");
}

#[test]
fn missing_continue_as_new_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion { commands: vec![] })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "ContinueAsNew");
    assert_eq!(e.actual, "nothing");
}

#[test]
fn the_routing_overrides_are_identity() {
    // Recorded without overrides: code that now routes the new run elsewhere diverges.
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let routed = Command {
        seq: 0,
        kind: Some(Kind::ContinueAsNew(ContinueAsNew {
            task_queue: "other".into(),
            workflow_type: "finisher".into(),
            ..Default::default()
        })),
    };
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![routed],
        })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "ContinueAsNew");
    assert_eq!(
        e.actual,
        "ContinueAsNew(task_queue=\"other\", workflow_type=\"finisher\")"
    );
}
