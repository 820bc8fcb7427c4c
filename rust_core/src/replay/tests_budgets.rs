//! Replay of budget reservations (`workflow.reserve()`).

use super::test_support::{marker, numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, BudgetReleased, BudgetReservationRequested, BudgetReserveFailed,
    BudgetReserved, Command, History, ReleaseBudget, ReserveBudget, SignalReceived,
    WorkflowStarted,
};

fn requested(seq: i64, budget: &str, amount: i64) -> Attributes {
    Attributes::BudgetReservationRequested(BudgetReservationRequested {
        seq,
        budget: budget.into(),
        amount,
    })
}

/// Task 1 reserves twice: seq 1 is granted in the same decision, seq 2 waits and is
/// refused; a later release (another run's) grants nothing here. Task 2 (woken by the
/// grant of seq 3, which waited) releases seq 1 and 3.
fn history() -> History {
    let events = [
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "reserver".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }),
        marker(1),
        requested(1, "llm-tokens", 2000),
        requested(2, "ghost", 5),
        requested(3, "llm-tokens", 4000),
        // The inputs the decision caused follow its command events.
        Attributes::BudgetReserved(BudgetReserved { seq: 1 }),
        Attributes::BudgetReserveFailed(BudgetReserveFailed {
            seq: 2,
            reason: "BUDGET_NOT_FOUND".into(),
            message: "no budget \"ghost\"".into(),
        }),
        // Seq 3 waited; a release elsewhere granted it later.
        Attributes::BudgetReserved(BudgetReserved { seq: 3 }),
        marker(8),
        Attributes::BudgetReleased(BudgetReleased { seq: 1 }),
        Attributes::BudgetReleased(BudgetReleased { seq: 3 }),
        Attributes::SignalReceived(SignalReceived {
            signal_name: "after".into(),
            ..Default::default()
        }),
    ];
    numbered(events.into())
}

fn reserve(seq: i64, budget: &str, amount: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::ReserveBudget(ReserveBudget {
            budget: budget.into(),
            amount,
        })),
    }
}

fn release(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::ReleaseBudget(ReleaseBudget {
            reservation_seq: seq,
        })),
    }
}

fn resolutions(a: &crate::proto::Activation) -> Vec<(i64, Option<String>)> {
    a.jobs
        .iter()
        .filter_map(|j| match &j.job {
            Some(Job::ResolveBudget(r)) => {
                Some((r.seq, r.failure.as_ref().map(|f| f.r#type.clone())))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn reservations_resolve_in_the_next_activation_and_releases_match() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    let first = m.next_activation().unwrap().unwrap();
    assert!(resolutions(&first).is_empty());
    m.complete_activation(ActivationCompletion {
        commands: vec![
            reserve(1, "llm-tokens", 2000),
            reserve(2, "ghost", 5),
            reserve(3, "llm-tokens", 4000),
        ],
    })
    .unwrap();
    let second = m.next_activation().unwrap().unwrap();
    assert!(second.is_replaying);
    assert_eq!(
        resolutions(&second),
        vec![
            (1, None),
            (2, Some("BUDGET_NOT_FOUND".to_string())),
            (3, None)
        ]
    );
    m.complete_activation(ActivationCompletion {
        commands: vec![release(1), release(3)],
    })
    .unwrap();
    // The signal after the releases is new: the final activation, no commands recorded.
    let last = m.next_activation().unwrap().unwrap();
    assert!(!last.is_replaying);
    m.complete_activation(ActivationCompletion::default())
        .unwrap();
    assert!(m.next_activation().unwrap().is_none());
}

#[test]
fn another_budget_or_amount_is_nondeterminism() {
    for (budget, amount, seq) in [("other", 2000, 1), ("llm-tokens", 1999, 1)] {
        let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
        m.next_activation().unwrap().unwrap();
        let err = m
            .complete_activation(ActivationCompletion {
                commands: vec![
                    reserve(seq, budget, amount),
                    reserve(2, "ghost", 5),
                    reserve(3, "llm-tokens", 4000),
                ],
            })
            .unwrap_err();
        let ReplayError::Nondeterminism(e) = err else {
            panic!("expected nondeterminism, got {err:?}");
        };
        assert_eq!(e.seq, 1);
        assert_eq!(
            e.expected,
            "ReserveBudget(seq=1, budget=\"llm-tokens\", amount=2000)"
        );
    }
}

#[test]
fn a_missing_release_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![
            reserve(1, "llm-tokens", 2000),
            reserve(2, "ghost", 5),
            reserve(3, "llm-tokens", 4000),
        ],
    })
    .unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![release(1)],
        })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "ReleaseBudget(reservation_seq=3)");
    assert_eq!(e.actual, "nothing");
}
