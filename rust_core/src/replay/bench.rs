//! A driver that replays a history with no workflow code: each recorded workflow task
//! is completed with the commands it recorded, rebuilt from its command events. It
//! measures the machine alone (`bench/replay_bench.py` calls it through
//! `durable_rpc._core.replay_core_bench`) and checks that the machine accepts every
//! history it indexes.

use std::time::{Duration, Instant};

use prost::Message;
use prost_types::Timestamp;

use super::error::{MalformedHistory, ReplayError};
use super::machine::ReplayMachine;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    complete_update, update_completed, AcceptUpdate, ActivationCompletion, AppendToStream,
    CancelTimer, CancelWorkflow, Command, CompleteUpdate, CompleteWorkflow, ContinueAsNew,
    FailWorkflow, History, Payload, ReadStream, RecordMarker, ReleaseBudget, RequestCancelActivity,
    RequestCancelChildWorkflow, ReserveBudget, ScheduleActivity, SignalExternalWorkflow,
    StartChildWorkflow, StartTimer, UpsertMemo, UpsertSearchAttributes,
};

/// What [`replay_echo`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EchoTimes {
    /// Events replayed (the history's length times the iterations).
    pub events: u64,
    /// Time spent decoding the History protobuf.
    pub decode: Duration,
    /// Time spent indexing and replaying (machine construction, every activation, every
    /// completion matched).
    pub replay: Duration,
}

/// Why an echo replay failed (it never should for a well-formed history).
#[derive(Debug)]
pub enum EchoError {
    Decode(prost::DecodeError),
    Malformed(MalformedHistory),
    Replay(ReplayError),
}

/// The command a recorded command event was made from (what a workflow produced).
pub fn command_of(attrs: &Attributes) -> Option<Command> {
    let (seq, kind) = match attrs.clone() {
        Attributes::ActivityScheduled(a) => (
            a.seq,
            Kind::ScheduleActivity(ScheduleActivity {
                activity_type: a.activity_type,
                input: a.input,
                task_queue: a.task_queue,
                options: a.options,
                ..Default::default()
            }),
        ),
        Attributes::TimerStarted(t) => (
            t.seq,
            Kind::StartTimer(StartTimer {
                duration: t.duration,
            }),
        ),
        Attributes::TimerCancelled(t) => {
            (t.seq, Kind::CancelTimer(CancelTimer { timer_seq: t.seq }))
        }
        Attributes::ActivityCancelRequested(a) => (
            a.seq,
            Kind::RequestCancelActivity(RequestCancelActivity {
                activity_seq: a.seq,
            }),
        ),
        Attributes::WorkflowCompleted(c) => (
            0,
            Kind::CompleteWorkflow(CompleteWorkflow { result: c.result }),
        ),
        Attributes::WorkflowFailed(f) => {
            (0, Kind::FailWorkflow(FailWorkflow { failure: f.failure }))
        }
        Attributes::WorkflowCancelled(_) => (0, Kind::CancelWorkflow(CancelWorkflow {})),
        Attributes::MarkerRecorded(m) => (
            m.seq,
            Kind::RecordMarker(RecordMarker {
                kind: m.kind,
                id: m.id,
                payload: m.payload,
                details: m.details,
            }),
        ),
        Attributes::SearchAttributesUpserted(u) => (
            0,
            Kind::UpsertSearchAttributes(UpsertSearchAttributes {
                search_attributes: u.search_attributes,
            }),
        ),
        Attributes::MemoUpserted(u) => (0, Kind::UpsertMemo(UpsertMemo { memo: u.memo })),
        Attributes::UpdateAccepted(u) => (
            0,
            Kind::AcceptUpdate(AcceptUpdate {
                update_id: u.update_id,
                update_name: u.update_name,
                input: u.input,
            }),
        ),
        Attributes::UpdateCompleted(u) => (
            0,
            Kind::CompleteUpdate(CompleteUpdate {
                update_id: u.update_id,
                outcome: u.outcome.map(|o| match o {
                    update_completed::Outcome::Result(r) => complete_update::Outcome::Result(r),
                    update_completed::Outcome::Failure(f) => complete_update::Outcome::Failure(f),
                }),
            }),
        ),
        Attributes::WorkflowContinuedAsNew(c) => (
            0,
            Kind::ContinueAsNew(ContinueAsNew {
                input: c.input,
                task_queue: c.task_queue,
                workflow_type: c.workflow_type,
                workflow_version: c.workflow_version,
            }),
        ),
        Attributes::ChildWorkflowInitiated(c) => (
            c.seq,
            Kind::StartChildWorkflow(StartChildWorkflow {
                workflow_type: c.workflow_type,
                workflow_version: c.workflow_version,
                workflow_id: c.workflow_id,
                task_queue: c.task_queue,
                input: c.input,
                ..Default::default()
            }),
        ),
        Attributes::ChildCancelRequested(c) => (
            c.seq,
            Kind::RequestCancelChildWorkflow(RequestCancelChildWorkflow { child_seq: c.seq }),
        ),
        Attributes::ExternalSignalInitiated(e) => (
            e.seq,
            Kind::SignalExternalWorkflow(SignalExternalWorkflow {
                workflow_id: e.workflow_id,
                run_id: e.run_id,
                signal_name: e.signal_name,
                input: e.input,
            }),
        ),
        Attributes::BudgetReservationRequested(b) => (
            b.seq,
            Kind::ReserveBudget(ReserveBudget {
                budget: b.budget,
                amount: b.amount,
            }),
        ),
        Attributes::BudgetReleased(b) => (
            b.seq,
            Kind::ReleaseBudget(ReleaseBudget {
                reservation_seq: b.seq,
            }),
        ),
        Attributes::StreamReadRequested(r) => (
            r.seq,
            Kind::ReadStream(ReadStream {
                stream: r.stream,
                offset: r.offset,
                limit: r.limit,
                wait: r.wait,
            }),
        ),
        Attributes::StreamAppended(a) => (
            a.seq,
            Kind::AppendToStream(AppendToStream {
                stream: a.stream,
                // Only the count is matched: the items themselves are in the stream.
                items: vec![Payload::default(); usize::try_from(a.count).unwrap_or(0)],
            }),
        ),
        _ => return None,
    };
    Some(Command {
        seq,
        kind: Some(kind),
    })
}

/// One completion per recorded workflow task, holding the commands it recorded.
pub fn recorded_completions(history: &History) -> Vec<ActivationCompletion> {
    let mut out: Vec<ActivationCompletion> = Vec::new();
    for event in &history.events {
        match event.attributes.as_ref() {
            Some(Attributes::WorkflowTaskCompleted(_)) => out.push(ActivationCompletion::default()),
            Some(attrs) => {
                if let (Some(command), Some(last)) = (command_of(attrs), out.last_mut()) {
                    last.commands.push(command);
                }
            }
            None => {}
        }
    }
    out
}

/// Replays `history` through the machine `completions` (see [`recorded_completions`])
/// drive: one per replayed activation, then an empty final activation. Returns the
/// number of activations.
pub fn replay_with(
    history: History,
    task_time: Timestamp,
    completions: Vec<ActivationCompletion>,
) -> Result<usize, EchoError> {
    let mut machine = ReplayMachine::new(history, task_time).map_err(EchoError::Malformed)?;
    let mut completions = completions.into_iter();
    let mut activations = 0;
    while let Some(activation) = machine
        .next_activation()
        .map_err(|e| EchoError::Replay(e.into()))?
    {
        activations += 1;
        let completion = if activation.is_replaying {
            completions.next().unwrap_or_default()
        } else {
            ActivationCompletion::default()
        };
        machine
            .complete_activation(completion)
            .map_err(EchoError::Replay)?;
    }
    Ok(activations)
}

/// Decodes and replays `encoded` (a serialized History) `iterations` times with no
/// workflow code, timing decoding and replay separately.
pub fn replay_echo(encoded: &[u8], iterations: u32) -> Result<EchoTimes, EchoError> {
    let history = History::decode(encoded).map_err(EchoError::Decode)?;
    let task_time = history
        .events
        .last()
        .and_then(|e| e.event_time)
        .unwrap_or_default();
    let completions = recorded_completions(&history);
    let mut times = EchoTimes {
        events: 0,
        decode: Duration::ZERO,
        replay: Duration::ZERO,
    };
    for _ in 0..iterations {
        // Built before the clock starts: they stand for what the workflow code produces.
        let ready = completions.clone();
        let started = Instant::now();
        let history = History::decode(encoded).map_err(EchoError::Decode)?;
        let decoded = Instant::now();
        times.events += history.events.len() as u64;
        replay_with(history, task_time, ready)?;
        times.replay += decoded.elapsed();
        times.decode += decoded - started;
    }
    Ok(times)
}

impl std::fmt::Display for EchoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EchoError::Decode(e) => write!(f, "invalid History protobuf: {e}"),
            EchoError::Malformed(e) => e.fmt(f),
            EchoError::Replay(e) => e.fmt(f),
        }
    }
}
