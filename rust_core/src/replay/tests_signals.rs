//! Replay of signals sent to other runs.

use super::test_support::{marker, numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, Command, ExternalSignalDelivered, ExternalSignalFailed,
    ExternalSignalInitiated, History, SignalExternalWorkflow, WorkflowStarted,
};

fn initiated(seq: i64, id: &str) -> Attributes {
    Attributes::ExternalSignalInitiated(ExternalSignalInitiated {
        seq,
        workflow_id: id.into(),
        signal_name: "poke".into(),
        ..Default::default()
    })
}

/// Two signals sent by the first task: one delivered, one to a run that does not exist.
fn history() -> History {
    let events = [
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "sender".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }),
        marker(1),
        // A task's command events first, then the inputs they caused.
        initiated(1, "other"),
        initiated(2, "ghost"),
        Attributes::ExternalSignalDelivered(ExternalSignalDelivered {
            seq: 1,
            run_id: "other-run".into(),
        }),
        Attributes::ExternalSignalFailed(ExternalSignalFailed {
            seq: 2,
            reason: "NOT_FOUND".into(),
            message: "no run of \"ghost\"".into(),
        }),
    ];
    numbered(events.into())
}

fn signal(seq: i64, id: &str, name: &str) -> Command {
    Command {
        seq,
        kind: Some(Kind::SignalExternalWorkflow(SignalExternalWorkflow {
            workflow_id: id.into(),
            signal_name: name.into(),
            ..Default::default()
        })),
    }
}

#[test]
fn sent_signals_resolve_in_the_next_activation() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![signal(1, "other", "poke"), signal(2, "ghost", "poke")],
    })
    .unwrap();
    let a = m.next_activation().unwrap().unwrap();
    let resolved: Vec<_> = a
        .jobs
        .iter()
        .map(|j| match &j.job {
            Some(Job::ResolveSignalExternal(r)) => {
                (r.seq, r.failure.as_ref().map(|f| f.r#type.clone()))
            }
            other => panic!("expected signal resolutions, got {other:?}"),
        })
        .collect();
    assert_eq!(
        resolved,
        vec![(1, None), (2, Some("NOT_FOUND".to_string()))]
    );
}

#[test]
fn a_different_target_or_signal_is_nondeterminism() {
    for (id, name) in [("elsewhere", "poke"), ("other", "prod")] {
        let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
        m.next_activation().unwrap().unwrap();
        let err = m
            .complete_activation(ActivationCompletion {
                commands: vec![signal(1, id, name), signal(2, "ghost", "poke")],
            })
            .unwrap_err();
        let ReplayError::Nondeterminism(e) = err else {
            panic!("expected nondeterminism, got {err:?}");
        };
        assert_eq!(
            e.expected,
            "SignalExternalWorkflow(seq=1, id=\"other\", signal=\"poke\")"
        );
    }
}
