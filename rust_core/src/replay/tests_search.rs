//! Replay of search-attribute upserts and workflow timeouts.

use std::collections::HashMap;

use super::test_support::{numbered, ts};
use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::search_attribute_value::Value;
use crate::proto::{
    ActivationCompletion, Command, History, Memo, Payload, SearchAttributeValue, SearchAttributes,
    SearchAttributesUpserted, UpsertSearchAttributes, WorkflowStarted, WorkflowTaskCompleted,
    WorkflowTimedOut,
};

fn attrs(pairs: &[(&str, Value)]) -> SearchAttributes {
    let mut indexed_fields = HashMap::new();
    for (name, value) in pairs {
        let tag = match value {
            Value::StringValue(_) => "keyword",
            Value::IntValue(_) => "int",
            Value::DoubleValue(_) => "double",
            Value::BoolValue(_) => "bool",
            Value::DatetimeValue(_) => "datetime",
        };
        indexed_fields.insert(
            (*name).to_owned(),
            SearchAttributeValue {
                r#type: tag.into(),
                value: Some(value.clone()),
            },
        );
    }
    SearchAttributes { indexed_fields }
}

fn history(upserted: SearchAttributes, timed_out: bool) -> History {
    let mut events = vec![
        Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "order".into(),
            run_id: "run-1".into(),
            memo: Some(Memo {
                fields: HashMap::from([(
                    "note".to_owned(),
                    Payload {
                        data: b"memo".to_vec(),
                        external: None,
                        metadata: Default::default(),
                    },
                )]),
            }),
            search_attributes: Some(attrs(&[("CustomerId", Value::StringValue("c-1".into()))])),
            ..Default::default()
        }),
        Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
            last_seen_event_id: 1,
            workflow_time: Some(ts(100)),
            ..Default::default()
        }),
        Attributes::SearchAttributesUpserted(SearchAttributesUpserted {
            search_attributes: Some(upserted),
        }),
    ];
    if timed_out {
        events.push(Attributes::WorkflowTimedOut(WorkflowTimedOut {
            timeout_kind: "execution".into(),
        }));
    }
    numbered(events)
}

fn upsert(pairs: &[(&str, Value)]) -> Command {
    Command {
        seq: 0,
        kind: Some(Kind::UpsertSearchAttributes(UpsertSearchAttributes {
            search_attributes: Some(attrs(pairs)),
        })),
    }
}

fn recorded() -> SearchAttributes {
    attrs(&[
        ("Amount", Value::IntValue(150)),
        ("Stage", Value::StringValue("paid".into())),
    ])
}

#[test]
fn start_job_carries_memo_and_search_attributes() {
    let mut m = ReplayMachine::new(history(recorded(), false), ts(9)).unwrap();
    let a = m.next_activation().unwrap().unwrap();
    let Some(Job::StartWorkflow(start)) = &a.jobs[0].job else {
        panic!("expected a start job");
    };
    assert_eq!(start.memo.as_ref().unwrap().fields["note"].data, b"memo");
    assert!(start
        .search_attributes
        .as_ref()
        .unwrap()
        .indexed_fields
        .contains_key("CustomerId"));
}

#[test]
fn matching_upsert_replays_in_any_map_order() {
    let mut m = ReplayMachine::new(history(recorded(), false), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let command = upsert(&[
        ("Stage", Value::StringValue("paid".into())),
        ("Amount", Value::IntValue(150)),
    ]);
    m.complete_activation(ActivationCompletion {
        commands: vec![command],
    })
    .unwrap();
    assert!(m.next_activation().unwrap().is_none());
    assert!(m.take_new_commands().is_empty());
}

#[test]
fn changed_upsert_value_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(recorded(), false), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let command = upsert(&[
        ("Amount", Value::IntValue(151)),
        ("Stage", Value::StringValue("paid".into())),
    ]);
    let err = m
        .complete_activation(ActivationCompletion {
            commands: vec![command],
        })
        .unwrap_err();
    let ReplayError::Nondeterminism(e) = err else {
        panic!("expected nondeterminism, got {err:?}");
    };
    assert_eq!(
        e.expected,
        "UpsertSearchAttributes(\"Amount\"=int:150, \"Stage\"=keyword:\"paid\")"
    );
    assert!(e.actual.contains("int:151"), "{}", e.actual);
}

#[test]
fn missing_upsert_is_nondeterminism() {
    let mut m = ReplayMachine::new(history(recorded(), false), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    let err = m
        .complete_activation(ActivationCompletion { commands: vec![] })
        .unwrap_err();
    assert!(matches!(err, ReplayError::Nondeterminism(_)));
}

#[test]
fn timed_out_yields_no_job() {
    let mut m = ReplayMachine::new(history(recorded(), true), ts(9)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![upsert(&[
            ("Amount", Value::IntValue(150)),
            ("Stage", Value::StringValue("paid".into())),
        ])],
    })
    .unwrap();
    assert!(m.next_activation().unwrap().is_none());
}
