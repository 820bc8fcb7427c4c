//! Replay of memo upserts (`workflow.upsert_memo()`).

use std::collections::HashMap;

use super::test_support::{numbered, ts};
use super::*;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, Command, History, Memo, MemoUpserted, Payload, UpsertMemo,
    WorkflowStarted, WorkflowTaskCompleted,
};

/// The Avro single-object frame of null (header, fingerprint, union index 0).
const NULL: &[u8] = b"\xc3\x01\xe2\xa3\x3d\xff\x55\x80\x22\x37\x00";

fn memo(pairs: &[(&str, &[u8])]) -> Memo {
    let fields = pairs
        .iter()
        .map(|(key, data)| {
            (
                (*key).to_owned(),
                Payload {
                    data: data.to_vec(),
                    external: None,
                    metadata: Default::default(),
                },
            )
        })
        .collect::<HashMap<_, _>>();
    Memo { fields }
}

fn history(upserted: Memo) -> History {
    numbered(vec![
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "order".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }),
        Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
            last_seen_event_id: 1,
            workflow_time: Some(ts(100)),
            ..Default::default()
        }),
        Attributes::MemoUpserted(MemoUpserted {
            memo: Some(upserted),
        }),
    ])
}

fn upsert(m: Memo) -> Command {
    Command {
        seq: 0,
        kind: Some(Kind::UpsertMemo(UpsertMemo { memo: Some(m) })),
    }
}

fn replay(recorded: Memo, produced: Memo) -> Result<(), ReplayError> {
    let mut m = ReplayMachine::new(history(recorded), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![upsert(produced)],
    })
}

#[test]
fn a_matching_upsert_replays_in_any_map_order() {
    let recorded = memo(&[("stage", b"a"), ("owner", NULL), ("tries", b"1")]);
    let produced = memo(&[("tries", b"1"), ("stage", b"a"), ("owner", NULL)]);
    replay(recorded, produced).expect("same keys and values");
}

#[test]
fn a_changed_value_is_nondeterminism() {
    let err = replay(
        memo(&[("stage", b"a"), ("owner", NULL)]),
        memo(&[("stage", b"b")]),
    )
    .expect_err("diverges");
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.seq, 0);
    assert_eq!(e.expected, "UpsertMemo(\"owner\"=null, \"stage\"=61)");
    assert_eq!(e.actual, "UpsertMemo(\"stage\"=62)");
}

#[test]
fn a_missing_upsert_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(memo(&[("k", b"v")])), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion { commands: vec![] })
        .expect_err("diverges");
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.expected, "UpsertMemo(\"k\"=76)");
    assert_eq!(e.actual, "nothing");
}
