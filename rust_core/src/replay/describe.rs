//! Recorded command events in the shape they are matched in, and the human-readable
//! descriptions used by [`super::NondeterminismError`].

use std::fmt;

use prost_types::Duration;

use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::search_attribute_value::Value;
use crate::proto::{
    complete_update, update_completed, Command, Memo, SearchAttributes, SessionOptions,
};

/// Marker kind of `workflow.side_effect()` values.
pub(crate) const SIDE_EFFECT: &str = "side_effect";
/// Marker kind of `workflow.patched()` / `workflow.deprecate_patch()` change ids.
pub(crate) const PATCH: &str = "patch";
/// Marker kind of `workflow.get_version()` decisions (`seq` 0, change `id`, the version
/// in the payload).
pub(crate) const VERSION: &str = "version";

/// A command event's identity: what a produced command must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// `session` is the canonical text of its worker-session options (empty: none), so
    /// replaying code that changed them is a mismatch.
    ActivityScheduled {
        seq: i64,
        activity_type: String,
        session: String,
    },
    /// `duration_nanos` is the normalized duration (an unset duration is zero).
    TimerStarted {
        seq: i64,
        duration_nanos: i128,
    },
    TimerCancelled {
        timer_seq: i64,
    },
    /// Workflow code cancelled activity `activity_seq` (its own seq).
    ActivityCancelRequested {
        activity_seq: i64,
    },
    WorkflowCompleted,
    WorkflowFailed,
    WorkflowCancelled,
    /// A side-effect (`seq` > 0, empty `id`) or patch (`seq` 0, change `id`) marker.
    /// The recorded payload is not part of the identity: replay returns it.
    Marker {
        seq: i64,
        kind: String,
        id: String,
    },
    /// `fields` is the canonical text of the upserted attributes (sorted by name).
    SearchAttributesUpserted {
        fields: String,
    },
    /// `workflow.upsert_memo()`: `fields` is the canonical text of the merged keys and
    /// their payload bytes (sorted by key).
    MemoUpserted {
        fields: String,
    },
    /// An update the validator accepted; the arguments are not part of the identity.
    UpdateAccepted {
        update_id: String,
        update_name: String,
    },
    /// An update handler finished; `failed` tells a failure from a result (whose value
    /// is not part of the identity).
    UpdateCompleted {
        update_id: String,
        failed: bool,
    },
    /// `workflow.continue_as_new()`: the routing overrides (empty = none) are the
    /// identity; the input is not (like a completion's result).
    WorkflowContinuedAsNew {
        task_queue: String,
        workflow_type: String,
    },
    /// A child workflow start: its type and id are the identity (not its input).
    ChildWorkflowInitiated {
        seq: i64,
        workflow_type: String,
        workflow_id: String,
    },
    /// The parent asked the child of `child_seq` to cancel.
    ChildCancelRequested {
        child_seq: i64,
    },
    /// A signal to another run: its target and name are the identity (not its input).
    ExternalSignalInitiated {
        seq: i64,
        workflow_id: String,
        signal_name: String,
    },
    /// `workflow.reserve()`: the budget and the amount are the identity.
    BudgetReservationRequested {
        seq: i64,
        budget: String,
        amount: i64,
    },
    /// The reservation of `reservation_seq` was released (its own seq).
    BudgetReleased {
        reservation_seq: i64,
    },
    /// `workflow.stream(name)` reading: the stream, the offset and the page size are the
    /// identity (the offset follows from the pages recorded before).
    StreamReadRequested {
        seq: i64,
        stream: String,
        offset: i64,
        limit: i32,
        wait: bool,
    },
    /// `workflow.stream(name).append()`: the stream and the item count are the identity.
    StreamAppended {
        seq: i64,
        stream: String,
        count: i32,
    },
}

impl Recorded {
    /// Whether this is a patch or version marker: one the code may no longer reach (a
    /// deprecated patch, or a `get_version()` every open run had settled, whose call was
    /// deleted), so replay skips it when unmatched.
    pub(crate) fn is_patch(&self) -> bool {
        matches!(self, Recorded::Marker { kind, .. } if kind == PATCH || kind == VERSION)
    }

    /// The command-event identity of `attrs`, or `None` when it is not a command event.
    pub(crate) fn from_attributes(attrs: &Attributes) -> Option<Recorded> {
        Some(match attrs {
            Attributes::ActivityScheduled(a) => Recorded::ActivityScheduled {
                seq: a.seq,
                activity_type: a.activity_type.clone(),
                session: session_text(a.options.as_ref().and_then(|o| o.session.as_ref())),
            },
            Attributes::TimerStarted(t) => Recorded::TimerStarted {
                seq: t.seq,
                duration_nanos: duration_nanos(t.duration.as_ref()),
            },
            Attributes::TimerCancelled(t) => Recorded::TimerCancelled { timer_seq: t.seq },
            Attributes::ActivityCancelRequested(a) => Recorded::ActivityCancelRequested {
                activity_seq: a.seq,
            },
            Attributes::WorkflowCompleted(_) => Recorded::WorkflowCompleted,
            Attributes::WorkflowFailed(_) => Recorded::WorkflowFailed,
            Attributes::WorkflowCancelled(_) => Recorded::WorkflowCancelled,
            Attributes::MarkerRecorded(m) => Recorded::Marker {
                seq: m.seq,
                kind: m.kind.clone(),
                id: m.id.clone(),
            },
            Attributes::SearchAttributesUpserted(u) => Recorded::SearchAttributesUpserted {
                fields: search_attributes_text(u.search_attributes.as_ref()),
            },
            Attributes::MemoUpserted(u) => Recorded::MemoUpserted {
                fields: memo_text(u.memo.as_ref()),
            },
            Attributes::UpdateAccepted(u) => Recorded::UpdateAccepted {
                update_id: u.update_id.clone(),
                update_name: u.update_name.clone(),
            },
            Attributes::UpdateCompleted(u) => Recorded::UpdateCompleted {
                update_id: u.update_id.clone(),
                failed: matches!(u.outcome, Some(update_completed::Outcome::Failure(_))),
            },
            Attributes::WorkflowContinuedAsNew(c) => Recorded::WorkflowContinuedAsNew {
                task_queue: c.task_queue.clone(),
                workflow_type: c.workflow_type.clone(),
            },
            Attributes::ChildWorkflowInitiated(c) => Recorded::ChildWorkflowInitiated {
                seq: c.seq,
                workflow_type: c.workflow_type.clone(),
                workflow_id: c.workflow_id.clone(),
            },
            Attributes::ChildCancelRequested(c) => {
                Recorded::ChildCancelRequested { child_seq: c.seq }
            }
            Attributes::ExternalSignalInitiated(e) => Recorded::ExternalSignalInitiated {
                seq: e.seq,
                workflow_id: e.workflow_id.clone(),
                signal_name: e.signal_name.clone(),
            },
            Attributes::BudgetReservationRequested(b) => Recorded::BudgetReservationRequested {
                seq: b.seq,
                budget: b.budget.clone(),
                amount: b.amount,
            },
            Attributes::BudgetReleased(b) => Recorded::BudgetReleased {
                reservation_seq: b.seq,
            },
            Attributes::StreamReadRequested(r) => Recorded::StreamReadRequested {
                seq: r.seq,
                stream: r.stream.clone(),
                offset: r.offset,
                limit: r.limit,
                wait: r.wait,
            },
            Attributes::StreamAppended(a) => Recorded::StreamAppended {
                seq: a.seq,
                stream: a.stream.clone(),
                count: a.count,
            },
            _ => return None,
        })
    }

    /// The identity a produced command would have been recorded with.
    pub(crate) fn from_command(command: &Command) -> Option<Recorded> {
        Some(match command.kind.as_ref()? {
            Kind::ScheduleActivity(a) => Recorded::ActivityScheduled {
                seq: command.seq,
                activity_type: a.activity_type.clone(),
                session: session_text(a.options.as_ref().and_then(|o| o.session.as_ref())),
            },
            Kind::StartTimer(t) => Recorded::TimerStarted {
                seq: command.seq,
                duration_nanos: duration_nanos(t.duration.as_ref()),
            },
            Kind::CancelTimer(c) => Recorded::TimerCancelled {
                timer_seq: c.timer_seq,
            },
            Kind::RequestCancelActivity(c) => Recorded::ActivityCancelRequested {
                activity_seq: c.activity_seq,
            },
            Kind::CompleteWorkflow(_) => Recorded::WorkflowCompleted,
            Kind::FailWorkflow(_) => Recorded::WorkflowFailed,
            Kind::CancelWorkflow(_) => Recorded::WorkflowCancelled,
            Kind::RecordMarker(m) => Recorded::Marker {
                seq: command.seq,
                kind: m.kind.clone(),
                id: m.id.clone(),
            },
            Kind::UpsertSearchAttributes(u) => Recorded::SearchAttributesUpserted {
                fields: search_attributes_text(u.search_attributes.as_ref()),
            },
            Kind::UpsertMemo(u) => Recorded::MemoUpserted {
                fields: memo_text(u.memo.as_ref()),
            },
            Kind::AcceptUpdate(u) => Recorded::UpdateAccepted {
                update_id: u.update_id.clone(),
                update_name: u.update_name.clone(),
            },
            Kind::CompleteUpdate(u) => Recorded::UpdateCompleted {
                update_id: u.update_id.clone(),
                failed: matches!(u.outcome, Some(complete_update::Outcome::Failure(_))),
            },
            Kind::ContinueAsNew(c) => Recorded::WorkflowContinuedAsNew {
                task_queue: c.task_queue.clone(),
                workflow_type: c.workflow_type.clone(),
            },
            Kind::StartChildWorkflow(c) => Recorded::ChildWorkflowInitiated {
                seq: command.seq,
                workflow_type: c.workflow_type.clone(),
                workflow_id: c.workflow_id.clone(),
            },
            Kind::RequestCancelChildWorkflow(c) => Recorded::ChildCancelRequested {
                child_seq: c.child_seq,
            },
            Kind::SignalExternalWorkflow(e) => Recorded::ExternalSignalInitiated {
                seq: command.seq,
                workflow_id: e.workflow_id.clone(),
                signal_name: e.signal_name.clone(),
            },
            Kind::ReserveBudget(b) => Recorded::BudgetReservationRequested {
                seq: command.seq,
                budget: b.budget.clone(),
                amount: b.amount,
            },
            Kind::ReleaseBudget(b) => Recorded::BudgetReleased {
                reservation_seq: b.reservation_seq,
            },
            Kind::ReadStream(r) => Recorded::StreamReadRequested {
                seq: command.seq,
                stream: r.stream.clone(),
                offset: r.offset,
                limit: r.limit,
                wait: r.wait,
            },
            Kind::AppendToStream(a) => Recorded::StreamAppended {
                seq: command.seq,
                stream: a.stream.clone(),
                count: i32::try_from(a.items.len()).unwrap_or(i32::MAX),
            },
        })
    }

    /// The workflow seq this identity carries, if any.
    pub(crate) fn seq(&self) -> Option<i64> {
        match self {
            Recorded::ActivityScheduled { seq, .. } | Recorded::TimerStarted { seq, .. } => {
                Some(*seq)
            }
            Recorded::TimerCancelled { timer_seq } => Some(*timer_seq),
            Recorded::ActivityCancelRequested { activity_seq } => Some(*activity_seq),
            Recorded::BudgetReservationRequested { seq, .. } => Some(*seq),
            Recorded::BudgetReleased { reservation_seq } => Some(*reservation_seq),
            Recorded::StreamReadRequested { seq, .. } | Recorded::StreamAppended { seq, .. } => {
                Some(*seq)
            }
            Recorded::Marker { seq, .. } if *seq != 0 => Some(*seq),
            _ => None,
        }
    }
}

impl fmt::Display for Recorded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Recorded::ActivityScheduled {
                seq,
                activity_type,
                session,
            } => {
                write!(f, "ScheduleActivity(seq={seq}, type={activity_type:?}")?;
                if !session.is_empty() {
                    write!(f, ", session({session})")?;
                }
                f.write_str(")")
            }
            Recorded::TimerStarted {
                seq,
                duration_nanos,
            } => {
                write!(
                    f,
                    "StartTimer(seq={seq}, duration={})",
                    DurationText(*duration_nanos)
                )
            }
            Recorded::TimerCancelled { timer_seq } => {
                write!(f, "CancelTimer(timer_seq={timer_seq})")
            }
            Recorded::ActivityCancelRequested { activity_seq } => {
                write!(f, "RequestCancelActivity(activity_seq={activity_seq})")
            }
            Recorded::WorkflowCompleted => f.write_str("CompleteWorkflow"),
            Recorded::WorkflowFailed => f.write_str("FailWorkflow"),
            Recorded::WorkflowCancelled => f.write_str("CancelWorkflow"),
            Recorded::Marker { seq, kind, id } => match kind.as_str() {
                PATCH if *seq == 0 => write!(f, "Patch(id={id:?})"),
                VERSION if *seq == 0 => write!(f, "Version(id={id:?})"),
                SIDE_EFFECT if id.is_empty() => write!(f, "SideEffect(seq={seq})"),
                _ => write!(f, "RecordMarker(seq={seq}, kind={kind:?}, id={id:?})"),
            },
            Recorded::SearchAttributesUpserted { fields } => {
                write!(f, "UpsertSearchAttributes({fields})")
            }
            Recorded::MemoUpserted { fields } => write!(f, "UpsertMemo({fields})"),
            Recorded::UpdateAccepted {
                update_id,
                update_name,
            } => write!(f, "AcceptUpdate(id={update_id:?}, name={update_name:?})"),
            Recorded::UpdateCompleted { update_id, failed } => {
                let outcome = if *failed { "failure" } else { "result" };
                write!(f, "CompleteUpdate(id={update_id:?}, {outcome})")
            }
            Recorded::WorkflowContinuedAsNew {
                task_queue,
                workflow_type,
            } => {
                f.write_str("ContinueAsNew")?;
                match (task_queue.is_empty(), workflow_type.is_empty()) {
                    (true, true) => Ok(()),
                    (false, true) => write!(f, "(task_queue={task_queue:?})"),
                    (true, false) => write!(f, "(workflow_type={workflow_type:?})"),
                    (false, false) => write!(
                        f,
                        "(task_queue={task_queue:?}, workflow_type={workflow_type:?})"
                    ),
                }
            }
            Recorded::ChildWorkflowInitiated {
                seq,
                workflow_type,
                workflow_id,
            } => write!(
                f,
                "StartChildWorkflow(seq={seq}, type={workflow_type:?}, id={workflow_id:?})"
            ),
            Recorded::ChildCancelRequested { child_seq } => {
                write!(f, "RequestCancelChildWorkflow(child_seq={child_seq})")
            }
            Recorded::ExternalSignalInitiated {
                seq,
                workflow_id,
                signal_name,
            } => write!(
                f,
                "SignalExternalWorkflow(seq={seq}, id={workflow_id:?}, signal={signal_name:?})"
            ),
            Recorded::BudgetReservationRequested {
                seq,
                budget,
                amount,
            } => write!(
                f,
                "ReserveBudget(seq={seq}, budget={budget:?}, amount={amount})"
            ),
            Recorded::BudgetReleased { reservation_seq } => {
                write!(f, "ReleaseBudget(reservation_seq={reservation_seq})")
            }
            Recorded::StreamReadRequested {
                seq,
                stream,
                offset,
                limit,
                wait,
            } => write!(
                f,
                "ReadStream(seq={seq}, stream={stream:?}, offset={offset}, limit={limit}, \
                 wait={wait})"
            ),
            Recorded::StreamAppended { seq, stream, count } => write!(
                f,
                "AppendToStream(seq={seq}, stream={stream:?}, items={count})"
            ),
        }
    }
}

/// The kind name of a history event, for error messages.
pub(crate) fn event_kind(attrs: &Attributes) -> &'static str {
    match attrs {
        Attributes::WorkflowStarted(_) => "workflow_started",
        Attributes::WorkflowTaskCompleted(_) => "workflow_task_completed",
        Attributes::ActivityScheduled(_) => "activity_scheduled",
        Attributes::ActivityCompleted(_) => "activity_completed",
        Attributes::ActivityFailed(_) => "activity_failed",
        Attributes::TimerStarted(_) => "timer_started",
        Attributes::TimerFired(_) => "timer_fired",
        Attributes::TimerCancelled(_) => "timer_cancelled",
        Attributes::SignalReceived(_) => "signal_received",
        Attributes::CancelRequested(_) => "cancel_requested",
        Attributes::WorkflowCompleted(_) => "workflow_completed",
        Attributes::WorkflowFailed(_) => "workflow_failed",
        Attributes::WorkflowCancelled(_) => "workflow_cancelled",
        Attributes::WorkflowTerminated(_) => "workflow_terminated",
        Attributes::MarkerRecorded(_) => "marker_recorded",
        Attributes::SearchAttributesUpserted(_) => "search_attributes_upserted",
        Attributes::MemoUpserted(_) => "memo_upserted",
        Attributes::WorkflowTimedOut(_) => "workflow_timed_out",
        Attributes::UpdateAccepted(_) => "update_accepted",
        Attributes::UpdateCompleted(_) => "update_completed",
        Attributes::WorkflowContinuedAsNew(_) => "workflow_continued_as_new",
        Attributes::ChildWorkflowInitiated(_) => "child_workflow_initiated",
        Attributes::ChildCancelRequested(_) => "child_cancel_requested",
        Attributes::ChildWorkflowStarted(_) => "child_workflow_started",
        Attributes::ChildWorkflowStartFailed(_) => "child_workflow_start_failed",
        Attributes::ChildWorkflowCompleted(_) => "child_workflow_completed",
        Attributes::ChildWorkflowFailed(_) => "child_workflow_failed",
        Attributes::ChildWorkflowCancelled(_) => "child_workflow_cancelled",
        Attributes::ChildWorkflowTerminated(_) => "child_workflow_terminated",
        Attributes::ChildWorkflowTimedOut(_) => "child_workflow_timed_out",
        Attributes::ActivityCancelRequested(_) => "activity_cancel_requested",
        Attributes::ActivityCancelled(_) => "activity_cancelled",
        Attributes::ExternalSignalInitiated(_) => "external_signal_initiated",
        Attributes::ExternalSignalDelivered(_) => "external_signal_delivered",
        Attributes::ExternalSignalFailed(_) => "external_signal_failed",
        Attributes::BudgetReservationRequested(_) => "budget_reservation_requested",
        Attributes::BudgetReleased(_) => "budget_released",
        Attributes::BudgetReserved(_) => "budget_reserved",
        Attributes::BudgetReserveFailed(_) => "budget_reserve_failed",
        Attributes::StreamReadRequested(_) => "stream_read_requested",
        Attributes::StreamRead(_) => "stream_read",
        Attributes::StreamAppended(_) => "stream_appended",
    }
}

/// Canonical text of search attributes: `name=type:value` sorted by name, so equal
/// upserts compare equal whatever the map order on the wire.
pub(crate) fn search_attributes_text(attrs: Option<&SearchAttributes>) -> String {
    let Some(attrs) = attrs else {
        return String::new();
    };
    let mut names: Vec<&String> = attrs.indexed_fields.keys().collect();
    names.sort();
    let parts: Vec<String> = names
        .into_iter()
        .map(|name| {
            let v = &attrs.indexed_fields[name];
            let value = match v.value.as_ref() {
                None => "unset".to_owned(),
                Some(Value::StringValue(s)) => format!("{s:?}"),
                Some(Value::IntValue(i)) => i.to_string(),
                Some(Value::DoubleValue(d)) => format!("{:?}", d.to_bits()),
                Some(Value::BoolValue(b)) => b.to_string(),
                Some(Value::DatetimeValue(t)) => format!("{}.{:09}", t.seconds, t.nanos),
            };
            format!("{name:?}={}:{value}", v.r#type)
        })
        .collect();
    parts.join(", ")
}

/// Canonical text of an upserted memo: `"key"=<hex of the payload bytes>` sorted by key
/// (`"key"=null` for the Avro null that removes it), so equal upserts compare equal
/// whatever the map order on the wire.
pub(crate) fn memo_text(memo: Option<&Memo>) -> String {
    let Some(memo) = memo else {
        return String::new();
    };
    let mut keys: Vec<&String> = memo.fields.keys().collect();
    keys.sort();
    let parts: Vec<String> = keys
        .into_iter()
        .map(|key| {
            let data = &memo.fields[key].data;
            // The Avro single-object frame of null: header, fingerprint, union index 0.
            if data.len() == 11 && data[10] == 0 {
                return format!("{key:?}=null");
            }
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            format!("{key:?}={hex}")
        })
        .collect();
    parts.join(", ")
}

/// The canonical text of worker-session options (requirements sorted by key); empty
/// when the activity names no session.
pub(crate) fn session_text(session: Option<&SessionOptions>) -> String {
    let Some(s) = session else {
        return String::new();
    };
    let mut keys: Vec<&String> = s.requires.keys().collect();
    keys.sort();
    let requires: Vec<String> = keys
        .into_iter()
        .map(|key| format!("{key:?}={:?}", s.requires[key]))
        .collect();
    format!(
        "id={:?}, lease={}s, ttl={}s, max_concurrent_activities={}, requires={{{}}}",
        s.session_id,
        s.lease_seconds,
        s.ttl_seconds,
        s.max_concurrent_activities,
        requires.join(", ")
    )
}

/// A duration as total nanoseconds; unset is zero. i128 cannot overflow here.
pub(crate) fn duration_nanos(d: Option<&Duration>) -> i128 {
    d.map_or(0, |d| {
        i128::from(d.seconds) * 1_000_000_000 + i128::from(d.nanos)
    })
}

/// Formats nanoseconds as seconds: `5s`, `1.5s`, `0.000001s`, `-2s`.
struct DurationText(i128);

impl fmt::Display for DurationText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let secs = abs / 1_000_000_000;
        let nanos = abs % 1_000_000_000;
        if nanos == 0 {
            write!(f, "{sign}{secs}s")
        } else {
            let frac = format!("{nanos:09}");
            write!(f, "{sign}{secs}.{}s", frac.trim_end_matches('0'))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_format_as_seconds() {
        assert_eq!(DurationText(5_000_000_000).to_string(), "5s");
        assert_eq!(DurationText(1_500_000_000).to_string(), "1.5s");
        assert_eq!(DurationText(1_000).to_string(), "0.000001s");
        assert_eq!(DurationText(-2_000_000_000).to_string(), "-2s");
        assert_eq!(DurationText(0).to_string(), "0s");
    }

    #[test]
    fn activity_description_quotes_the_type() {
        let r = Recorded::ActivityScheduled {
            seq: 2,
            activity_type: "charge".into(),
            session: String::new(),
        };
        assert_eq!(r.to_string(), "ScheduleActivity(seq=2, type=\"charge\")");
    }
}
