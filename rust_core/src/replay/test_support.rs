//! Builders shared by the replay tests.

use prost_types::Timestamp;

use crate::proto::history_event::Attributes;
use crate::proto::{History, HistoryEvent, WorkflowTaskCompleted};

pub(crate) fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

/// `events` numbered 1..N, all at time 1000 s.
pub(crate) fn numbered(events: Vec<Attributes>) -> History {
    History {
        events: events
            .into_iter()
            .enumerate()
            .map(|(i, a)| HistoryEvent {
                event_id: i as i64 + 1,
                event_time: Some(ts(1000)),
                attributes: Some(a),
            })
            .collect(),
    }
}

/// A workflow task's WorkflowTaskCompleted marker, at workflow time 100 s.
pub(crate) fn marker(last_seen: i64) -> Attributes {
    Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
        last_seen_event_id: last_seen,
        workflow_time: Some(ts(100)),
        ..Default::default()
    })
}
