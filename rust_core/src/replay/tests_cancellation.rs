//! Replay of cooperative cancellation: a CancelRequested event becomes a CancelWorkflow
//! job carrying the request's time (the event's), its cleanup deadline and whether it
//! is cooperative, so `workflow.cancellation()` reads the same on every replay.

use super::test_support::{marker, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, CancelRequested, CancelWorkflowJob, History, HistoryEvent,
    WorkflowStarted,
};

fn history(cancel: CancelRequested) -> History {
    let events = vec![
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "order".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }),
        marker(1),
        Attributes::CancelRequested(cancel),
    ];
    History {
        events: events
            .into_iter()
            .enumerate()
            .map(|(i, a)| HistoryEvent {
                event_id: i as i64 + 1,
                // The cancel request at 1234 s, after the start at 1000 s.
                event_time: Some(ts(if i == 2 { 1234 } else { 1000 })),
                attributes: Some(a),
            })
            .collect(),
    }
}

fn cancel_job(cancel: CancelRequested) -> CancelWorkflowJob {
    let mut m = ReplayMachine::new(history(cancel), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion { commands: vec![] })
        .unwrap();
    let activation = m.next_activation().unwrap().unwrap();
    match activation.jobs.into_iter().next().and_then(|j| j.job) {
        Some(Job::CancelWorkflow(job)) => job,
        other => panic!("expected a cancel_workflow job, got {other:?}"),
    }
}

#[test]
fn a_cooperative_request_carries_its_time_and_cleanup_deadline() {
    let job = cancel_job(CancelRequested {
        reason: "user asked".into(),
        cleanup_deadline: Some(ts(1294)),
        cooperative: true,
    });
    assert_eq!(
        job,
        CancelWorkflowJob {
            reason: "user asked".into(),
            requested_at: Some(ts(1234)),
            cleanup_deadline: Some(ts(1294)),
            cooperative: true,
        }
    );
}

#[test]
fn a_request_recorded_before_cooperative_cancellation_stays_non_cooperative() {
    let job = cancel_job(CancelRequested {
        reason: "old".into(),
        ..Default::default()
    });
    assert!(!job.cooperative);
    assert_eq!(job.cleanup_deadline, None);
    assert_eq!(job.requested_at, Some(ts(1234)));
}
