//! Replay of child workflows.

use super::test_support::{marker, numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::resolve_child_workflow_job::Outcome;
use crate::proto::{
    ActivationCompletion, ChildCancelRequested, ChildWorkflowFailed, ChildWorkflowInitiated,
    ChildWorkflowStarted, Command, Failure, History, RequestCancelChildWorkflow,
    StartChildWorkflow, WorkflowStarted,
};

fn history() -> History {
    let events = [
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "parent".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }),
        marker(1),
        Attributes::ChildWorkflowInitiated(ChildWorkflowInitiated {
            seq: 1,
            workflow_type: "child".into(),
            workflow_id: "kid".into(),
            ..Default::default()
        }),
        Attributes::ChildWorkflowStarted(ChildWorkflowStarted {
            seq: 1,
            workflow_id: "kid".into(),
            run_id: "kid-run".into(),
        }),
        marker(4),
        Attributes::ChildCancelRequested(ChildCancelRequested { seq: 1 }),
        Attributes::ChildWorkflowFailed(ChildWorkflowFailed {
            seq: 1,
            run_id: "kid-run".into(),
            failure: Some(Failure {
                message: "boom".into(),
                ..Default::default()
            }),
        }),
    ];
    numbered(events.into())
}

fn start_child(seq: i64, workflow_type: &str, id: &str) -> Command {
    Command {
        seq,
        kind: Some(Kind::StartChildWorkflow(StartChildWorkflow {
            workflow_type: workflow_type.into(),
            workflow_id: id.into(),
            ..Default::default()
        })),
    }
}

fn cancel_child(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::RequestCancelChildWorkflow(
            RequestCancelChildWorkflow { child_seq: seq },
        )),
    }
}

#[test]
fn child_start_and_close_resolve_in_later_activations() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![start_child(1, "child", "kid")],
    })
    .unwrap();
    let a = m.next_activation().unwrap().unwrap();
    let Some(Job::ResolveChildWorkflowStart(started)) = &a.jobs[0].job else {
        panic!("expected a child start resolution, got {:?}", a.jobs);
    };
    assert_eq!((started.seq, started.run_id.as_str()), (1, "kid-run"));
    m.complete_activation(ActivationCompletion {
        commands: vec![cancel_child(1)],
    })
    .unwrap();
    let a = m.next_activation().unwrap().unwrap();
    assert!(!a.is_replaying);
    let Some(Job::ResolveChildWorkflow(closed)) = &a.jobs[0].job else {
        panic!("expected a child resolution, got {:?}", a.jobs);
    };
    assert_eq!(closed.status, "failed");
    assert!(matches!(&closed.outcome, Some(Outcome::Failed(f)) if f.message == "boom"));
}

#[test]
fn a_different_child_id_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![start_child(1, "child", "other")],
        })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.seq, 1);
    assert_eq!(
        e.expected,
        "StartChildWorkflow(seq=1, type=\"child\", id=\"kid\")"
    );
    assert_eq!(
        e.actual,
        "StartChildWorkflow(seq=1, type=\"child\", id=\"other\")"
    );
}

#[test]
fn a_different_child_type_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![start_child(1, "other", "kid")],
        })
        .unwrap_err();
    assert!(matches!(err, ReplayError::Nondeterminism(_)));
}

#[test]
fn a_missing_child_cancel_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![start_child(1, "child", "kid")],
    })
    .unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion { commands: vec![] })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "RequestCancelChildWorkflow(child_seq=1)");
    assert_eq!(e.actual, "nothing");
}
