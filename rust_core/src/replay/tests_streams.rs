//! Replay of message streams (`workflow.stream(name)`): reads and appends.

use super::test_support::{marker, numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    ActivationCompletion, AppendToStream, Command, History, Payload, ReadStream, StreamAppended,
    StreamItem, StreamRead, StreamReadRequested, WorkflowStarted,
};

fn item(offset: i64, data: &[u8]) -> StreamItem {
    StreamItem {
        offset,
        dedup_id: format!("d{offset}"),
        payload: Some(Payload {
            data: data.to_vec(),
            ..Default::default()
        }),
        append_time: None,
    }
}

/// Task 1 reads "orders" from 0 (two items there, recorded in the same decision) and
/// appends one item to "out"; task 2 reads from 2 and waits: an append later recorded
/// the page that ended the wait.
fn history() -> History {
    let events = [
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "consumer".into(),
            run_id: "run-1".into(),
            ..Default::default()
        }),
        marker(1),
        Attributes::StreamReadRequested(StreamReadRequested {
            seq: 1,
            stream: "orders".into(),
            offset: 0,
            limit: 100,
            wait: true,
        }),
        Attributes::StreamAppended(StreamAppended {
            seq: 2,
            stream: "out".into(),
            first_offset: 0,
            count: 1,
        }),
        Attributes::StreamRead(StreamRead {
            seq: 1,
            stream: "orders".into(),
            offset: 0,
            items: vec![item(0, b"a"), item(1, b"b")],
            next_offset: 2,
        }),
        marker(5),
        Attributes::StreamReadRequested(StreamReadRequested {
            seq: 3,
            stream: "orders".into(),
            offset: 2,
            limit: 100,
            wait: true,
        }),
        Attributes::StreamRead(StreamRead {
            seq: 3,
            stream: "orders".into(),
            offset: 2,
            items: vec![item(2, b"c")],
            next_offset: 3,
        }),
    ];
    numbered(events.into())
}

fn read(seq: i64, offset: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::ReadStream(ReadStream {
            stream: "orders".into(),
            offset,
            limit: 100,
            wait: true,
        })),
    }
}

fn append(seq: i64, items: usize) -> Command {
    Command {
        seq,
        kind: Some(Kind::AppendToStream(AppendToStream {
            stream: "out".into(),
            items: vec![Payload::default(); items],
        })),
    }
}

fn pages(a: &crate::proto::Activation) -> Vec<(i64, Vec<i64>, i64)> {
    a.jobs
        .iter()
        .filter_map(|j| match &j.job {
            Some(Job::ResolveStreamRead(r)) => Some((
                r.seq,
                r.items.iter().map(|i| i.offset).collect(),
                r.next_offset,
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn recorded_pages_resolve_the_reads_that_asked_for_them() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    let first = m.next_activation().unwrap().unwrap();
    assert!(pages(&first).is_empty());
    m.complete_activation(ActivationCompletion {
        commands: vec![read(1, 0), append(2, 1)],
    })
    .unwrap();
    let second = m.next_activation().unwrap().unwrap();
    assert!(second.is_replaying);
    assert_eq!(pages(&second), vec![(1, vec![0, 1], 2)]);
    m.complete_activation(ActivationCompletion {
        commands: vec![read(3, 2)],
    })
    .unwrap();
    // The page that ended the wait is new input: the last activation resolves it.
    let last = m.next_activation().unwrap().unwrap();
    assert!(!last.is_replaying);
    assert_eq!(pages(&last), vec![(3, vec![2], 3)]);
    let payload = match &last.jobs[0].job {
        Some(Job::ResolveStreamRead(r)) => r.items[0].payload.clone().unwrap().data,
        other => panic!("expected a stream read, got {other:?}"),
    };
    assert_eq!(payload, b"c");
    m.complete_activation(ActivationCompletion::default())
        .unwrap();
    assert!(m.next_activation().unwrap().is_none());
}

#[test]
fn another_offset_or_stream_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![read(1, 5), append(2, 1)],
        })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.seq, 1);
    assert_eq!(
        e.expected,
        "ReadStream(seq=1, stream=\"orders\", offset=0, limit=100, wait=true)"
    );
    assert_eq!(
        e.actual,
        "ReadStream(seq=1, stream=\"orders\", offset=5, limit=100, wait=true)"
    );
}

#[test]
fn another_item_count_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![read(1, 0), append(2, 3)],
        })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(e.seq, 2);
    assert_eq!(e.expected, "AppendToStream(seq=2, stream=\"out\", items=1)");
    assert_eq!(e.actual, "AppendToStream(seq=2, stream=\"out\", items=3)");
}
