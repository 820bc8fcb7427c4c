//! [`ReplayMachine`]: history in, activations out, commands checked.

use std::ops::Range;

use prost::Message;
use prost_types::Timestamp;

use super::describe::{event_kind, Recorded};
use super::error::{Continuation, MalformedHistory, NondeterminismError, ReplayError, UsageError};
use crate::proto::activation_job::Job;
use crate::proto::history_event::Attributes;
use crate::proto::resolve_activity_job::Outcome;
use crate::proto::{resolve_child_workflow_job, Failure};
use crate::proto::{
    Activation, ActivationCompletion, ActivationJob, CancelWorkflowJob, Command, DoUpdateJob,
    FireTimerJob, History, HistoryEvent, RecordedMarker, ResolveActivityJob, ResolveBudgetJob,
    ResolveChildWorkflowJob, ResolveChildWorkflowStartJob, ResolveSignalExternalJob,
    ResolveStreamReadJob, SignalWorkflowJob, StartWorkflowJob,
};

/// Written in descriptions when one side of a comparison has nothing.
const NOTHING: &str = "nothing";

/// One recorded workflow task (a `workflow_task_completed` marker).
#[derive(Debug)]
struct Task {
    last_seen: i64,
    workflow_time: Option<Timestamp>,
    /// The task's command events, as a range of `ReplayMachine::recorded`.
    commands: Range<usize>,
    /// The task's marker events, as a range of `ReplayMachine::markers`.
    markers: Range<usize>,
    /// The updates the task accepted, as a range of `ReplayMachine::updates`.
    updates: Range<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No activation outstanding; `next_activation` may be called.
    Idle,
    /// Replayed activation of task `n` outstanding.
    Replaying(usize),
    /// The final, non-replayed activation is outstanding.
    Final,
    /// Nothing more to deliver.
    Done,
    /// Nondeterminism was reported.
    Failed,
}

/// Replays one run's history.
///
/// Call [`next_activation`](Self::next_activation) and
/// [`complete_activation`](Self::complete_activation) alternately until
/// `next_activation` returns `None`, then collect
/// [`take_new_commands`](Self::take_new_commands). All work is linear in the size of the
/// history: it is indexed once in [`new`](Self::new) and then consumed with cursors.
#[derive(Debug)]
pub struct ReplayMachine {
    run_id: String,
    task_time: Timestamp,
    tasks: Vec<Task>,
    recorded: Vec<Recorded>,
    /// Recorded markers (side-effect values, patch ids) in event order; a replayed
    /// activation carries its task's, taken out when it is handed out.
    markers: Vec<RecordedMarker>,
    /// Input events as ready-made jobs, in event order; delivered ones are taken out.
    inputs: Vec<ActivationJob>,
    /// Recorded `update_accepted` events as update jobs (no validation), in event order;
    /// a replayed activation carries its task's after its input jobs.
    updates: Vec<ActivationJob>,
    /// Update requests not in history yet (see `add_pending_update`): they go to the
    /// final, non-replayed activation after its input jobs.
    pending_updates: Vec<ActivationJob>,
    next_input: usize,
    next_task: usize,
    state: State,
    last_replaying: bool,
    new_commands: Vec<Command>,
    /// `history_bytes[n]`: the serialized size of events 1..=n (index 0 is 0), so an
    /// activation can say how big the history was when its task ran.
    history_bytes: Vec<i64>,
    /// The event id of `history_bytes[0]`: 0, or the last delivered event once the
    /// delivered ones' sizes were released (`release_delivered`).
    bytes_from: i64,
    /// True right after a marker and while its command events continue (indexing state,
    /// kept so a continuation indexes its events exactly as one history would be).
    in_command_group: bool,
}

impl ReplayMachine {
    /// Indexes `history`; `task_time` is the current workflow task's time (the clock of
    /// the final, non-replayed activation).
    pub fn new(history: History, task_time: Timestamp) -> Result<Self, MalformedHistory> {
        if history.events.is_empty() {
            return Err(MalformedHistory::new(
                "history is empty: event 1 must be workflow_started",
            ));
        }
        let mut history_bytes = Vec::with_capacity(history.events.len() + 1);
        history_bytes.push(0);
        let mut machine = ReplayMachine {
            run_id: String::new(),
            task_time,
            tasks: Vec::new(),
            recorded: Vec::new(),
            markers: Vec::new(),
            inputs: Vec::new(),
            updates: Vec::new(),
            pending_updates: Vec::new(),
            next_input: 0,
            next_task: 0,
            state: State::Idle,
            last_replaying: false,
            new_commands: Vec::new(),
            history_bytes,
            bytes_from: 0,
            in_command_group: false,
        };
        machine.ingest(history.events)?;
        Ok(machine)
    }

    /// Continues a machine that delivered everything (``next_activation`` returned
    /// `None`) with `tail`, the events recorded after it, so a cached workflow instance
    /// applies only new events (sticky execution). `sent` are the commands the worker
    /// completed the last task with: the final activation's, plus those the instance
    /// produced after it within the same task (local activities resolved).
    ///
    /// The tail must start right after the known history, and its first workflow task
    /// must be that decision exactly: seeing every event the decision saw and no more,
    /// at the same workflow time, recording exactly `sent`. Anything else (another
    /// worker decided meanwhile, the decision was never recorded) is
    /// [`Continuation::Diverged`]: the caller drops the machine and replays from event 1.
    /// Events after that task are indexed as one history would be; the task itself is
    /// not replayed again (its instance already ran it).
    pub fn continue_with(
        &mut self,
        tail: History,
        task_time: Timestamp,
        sent: &[Command],
    ) -> Result<(), Continuation> {
        if self.state != State::Done {
            return Err(Continuation::Diverged(
                "the machine still has activations to deliver".into(),
            ));
        }
        let through = self.known_events();
        let first = tail.events.first().map_or(0, |e| e.event_id);
        if first != through + 1 {
            return Err(Continuation::Diverged(format!(
                "the new events start at event {first}, not right after event {through}"
            )));
        }
        let decided_time = self.task_time;
        let sent: Vec<Recorded> = sent.iter().filter_map(Recorded::from_command).collect();
        // Done released everything delivered (see `release_delivered`).
        let task_index = 0;
        self.ingest(tail.events).map_err(Continuation::Malformed)?;
        let Some(task) = self.tasks.get(task_index) else {
            return Err(Continuation::Diverged(
                "the new events record no workflow task".into(),
            ));
        };
        if task.last_seen != through {
            return Err(Continuation::Diverged(format!(
                "the next recorded workflow task saw {} events, the cached decision {through}",
                task.last_seen
            )));
        }
        if task.workflow_time.map(millis) != Some(millis(decided_time)) {
            return Err(Continuation::Diverged(
                "the next recorded workflow task ran at another time (another claim)".into(),
            ));
        }
        if self.recorded[task.commands.clone()] != sent[..] {
            return Err(Continuation::Diverged(
                "the next recorded workflow task recorded other commands".into(),
            ));
        }
        // Already applied by the live instance: its markers and updates are dropped.
        let (markers, updates) = (task.markers.clone(), task.updates.clone());
        self.markers[markers]
            .iter_mut()
            .for_each(|m| *m = RecordedMarker::default());
        self.updates[updates]
            .iter_mut()
            .for_each(|u| *u = ActivationJob::default());
        self.next_task = task_index + 1;
        self.task_time = task_time;
        self.new_commands.clear();
        self.state = State::Idle;
        Ok(())
    }

    /// How many events the machine indexed (the last event id it knows).
    fn known_events(&self) -> i64 {
        self.bytes_from + self.history_bytes.len() as i64 - 1
    }

    /// How many indexed items (tasks, commands, markers, inputs, updates) it holds.
    #[cfg(test)]
    pub(crate) fn retained(&self) -> usize {
        self.history_bytes.len() - 1
            + self.tasks.len()
            + self.recorded.len()
            + self.markers.len()
            + self.inputs.len()
            + self.updates.len()
    }

    /// Indexes `events` (the next ones of the history) into tasks, recorded commands,
    /// markers, updates and input jobs.
    fn ingest(&mut self, events: Vec<HistoryEvent>) -> Result<(), MalformedHistory> {
        let ReplayMachine {
            run_id,
            tasks,
            recorded,
            markers,
            inputs,
            updates,
            history_bytes,
            bytes_from,
            in_command_group,
            ..
        } = self;
        history_bytes.reserve(events.len());
        for event in events {
            let known = *bytes_from + history_bytes.len() as i64 - 1;
            let size = history_bytes.last().copied().unwrap_or(0) + event.encoded_len() as i64;
            history_bytes.push(size);
            let expected_id = known + 1;
            let id = event.event_id;
            if id != expected_id {
                return Err(MalformedHistory::new(format!(
                    "event at position {expected_id} has event_id {id}: events must be numbered \
                     1..N without gaps"
                )));
            }
            let Some(attrs) = event.attributes else {
                return Err(MalformedHistory::new(format!(
                    "event {id} has no attributes"
                )));
            };
            if id == 1 && !matches!(attrs, Attributes::WorkflowStarted(_)) {
                return Err(MalformedHistory::new(format!(
                    "event 1 must be workflow_started, got {}",
                    event_kind(&attrs)
                )));
            }

            if let Some(command) = Recorded::from_attributes(&attrs) {
                if !*in_command_group {
                    return Err(MalformedHistory::new(format!(
                        "event {id} ({}) is a command event not preceded by a \
                         workflow_task_completed marker",
                        event_kind(&attrs)
                    )));
                }
                recorded.push(command);
                if let Attributes::UpdateAccepted(accepted) = &attrs {
                    updates.push(ActivationJob {
                        event_id: id,
                        job: Some(Job::DoUpdate(DoUpdateJob {
                            update_id: accepted.update_id.clone(),
                            update_name: accepted.update_name.clone(),
                            input: accepted.input.clone(),
                            validate: false,
                        })),
                    });
                }
                if let Attributes::MarkerRecorded(marker) = attrs {
                    markers.push(RecordedMarker {
                        seq: marker.seq,
                        kind: marker.kind,
                        id: marker.id,
                        payload: marker.payload,
                    });
                }
                if let Some(task) = tasks.last_mut() {
                    task.commands.end = recorded.len();
                    task.markers.end = markers.len();
                    task.updates.end = updates.len();
                }
                continue;
            }
            *in_command_group = false;

            let job = match attrs {
                Attributes::WorkflowTaskCompleted(marker) => {
                    let last_seen = marker.last_seen_event_id;
                    if last_seen >= id {
                        return Err(MalformedHistory::new(format!(
                            "marker event {id} has last_seen_event_id {last_seen}, which is not \
                             before the marker itself"
                        )));
                    }
                    if last_seen < 1 {
                        return Err(MalformedHistory::new(format!(
                            "marker event {id} has last_seen_event_id {last_seen}: a workflow \
                             task sees at least event 1"
                        )));
                    }
                    if let Some(previous) = tasks.last() {
                        if last_seen < previous.last_seen {
                            return Err(MalformedHistory::new(format!(
                                "marker event {id} has last_seen_event_id {last_seen}, before the \
                                 previous marker's {}",
                                previous.last_seen
                            )));
                        }
                    }
                    tasks.push(Task {
                        last_seen,
                        workflow_time: marker.workflow_time.or(event.event_time),
                        commands: recorded.len()..recorded.len(),
                        markers: markers.len()..markers.len(),
                        updates: updates.len()..updates.len(),
                    });
                    *in_command_group = true;
                    continue;
                }
                Attributes::WorkflowStarted(started) => {
                    if id != 1 {
                        return Err(MalformedHistory::new(format!(
                            "event {id} is a second workflow_started (only event 1 may be)"
                        )));
                    }
                    run_id.clone_from(&started.run_id);
                    Job::StartWorkflow(StartWorkflowJob {
                        workflow_type: started.workflow_type,
                        workflow_version: started.workflow_version,
                        workflow_id: started.workflow_id,
                        run_id: started.run_id,
                        input: started.input,
                        memo: started.memo,
                        search_attributes: started.search_attributes,
                        continued_from_run_id: started.continued_from_run_id,
                        random_seed_run_id: started.random_seed_run_id,
                    })
                }
                Attributes::ActivityCompleted(done) => Job::ResolveActivity(ResolveActivityJob {
                    seq: done.seq,
                    attempt: done.attempt,
                    ambiguous: false,
                    cancelled: false,
                    outcome: Some(Outcome::Completed(done.result.unwrap_or_default())),
                }),
                Attributes::ActivityFailed(failed) => Job::ResolveActivity(ResolveActivityJob {
                    seq: failed.seq,
                    attempt: failed.attempt,
                    ambiguous: failed.ambiguous,
                    cancelled: false,
                    outcome: Some(Outcome::Failed(failed.failure.unwrap_or_default())),
                }),
                Attributes::ActivityCancelled(cancelled) => {
                    Job::ResolveActivity(ResolveActivityJob {
                        seq: cancelled.seq,
                        attempt: cancelled.attempt,
                        cancelled: true,
                        ..Default::default()
                    })
                }
                Attributes::TimerFired(fired) => Job::FireTimer(FireTimerJob { seq: fired.seq }),
                Attributes::SignalReceived(signal) => Job::SignalWorkflow(SignalWorkflowJob {
                    signal_name: signal.signal_name,
                    input: signal.input,
                }),
                // The event's own time is the request's time (workflow.cancellation()).
                Attributes::CancelRequested(cancel) => Job::CancelWorkflow(CancelWorkflowJob {
                    reason: cancel.reason,
                    requested_at: event.event_time,
                    cleanup_deadline: cancel.cleanup_deadline,
                    cooperative: cancel.cooperative,
                }),
                Attributes::ChildWorkflowStarted(started) => {
                    Job::ResolveChildWorkflowStart(ResolveChildWorkflowStartJob {
                        seq: started.seq,
                        run_id: started.run_id,
                        failure: None,
                    })
                }
                Attributes::ChildWorkflowStartFailed(failed) => {
                    Job::ResolveChildWorkflowStart(ResolveChildWorkflowStartJob {
                        seq: failed.seq,
                        run_id: String::new(),
                        failure: Some(Failure {
                            message: failed.message,
                            r#type: failed.reason,
                            ..Default::default()
                        }),
                    })
                }
                Attributes::ChildWorkflowCompleted(done) => {
                    Job::ResolveChildWorkflow(ResolveChildWorkflowJob {
                        seq: done.seq,
                        status: "completed".into(),
                        run_id: done.run_id,
                        outcome: Some(resolve_child_workflow_job::Outcome::Completed(
                            done.result.unwrap_or_default(),
                        )),
                    })
                }
                Attributes::ChildWorkflowFailed(c) => {
                    child_closed(c.seq, "failed", c.run_id, c.failure)
                }
                Attributes::ChildWorkflowCancelled(c) => {
                    child_closed(c.seq, "cancelled", c.run_id, c.failure)
                }
                Attributes::ChildWorkflowTerminated(c) => {
                    child_closed(c.seq, "terminated", c.run_id, c.failure)
                }
                Attributes::ChildWorkflowTimedOut(c) => {
                    child_closed(c.seq, "timed_out", c.run_id, c.failure)
                }
                Attributes::ExternalSignalDelivered(delivered) => {
                    Job::ResolveSignalExternal(ResolveSignalExternalJob {
                        seq: delivered.seq,
                        failure: None,
                    })
                }
                Attributes::ExternalSignalFailed(failed) => {
                    Job::ResolveSignalExternal(ResolveSignalExternalJob {
                        seq: failed.seq,
                        failure: Some(Failure {
                            message: failed.message,
                            r#type: failed.reason,
                            ..Default::default()
                        }),
                    })
                }
                Attributes::BudgetReserved(reserved) => Job::ResolveBudget(ResolveBudgetJob {
                    seq: reserved.seq,
                    failure: None,
                }),
                Attributes::BudgetReserveFailed(failed) => Job::ResolveBudget(ResolveBudgetJob {
                    seq: failed.seq,
                    failure: Some(Failure {
                        message: failed.message,
                        r#type: failed.reason,
                        ..Default::default()
                    }),
                }),
                Attributes::StreamRead(read) => Job::ResolveStreamRead(ResolveStreamReadJob {
                    seq: read.seq,
                    offset: read.offset,
                    items: read.items,
                    next_offset: read.next_offset,
                }),
                // Terminal, delivers nothing.
                Attributes::WorkflowTerminated(_) | Attributes::WorkflowTimedOut(_) => continue,
                // Command events were handled above.
                Attributes::ActivityScheduled(_)
                | Attributes::TimerStarted(_)
                | Attributes::TimerCancelled(_)
                | Attributes::WorkflowCompleted(_)
                | Attributes::WorkflowFailed(_)
                | Attributes::WorkflowCancelled(_)
                | Attributes::MarkerRecorded(_)
                | Attributes::SearchAttributesUpserted(_)
                | Attributes::MemoUpserted(_)
                | Attributes::UpdateAccepted(_)
                | Attributes::UpdateCompleted(_)
                | Attributes::WorkflowContinuedAsNew(_)
                | Attributes::ActivityCancelRequested(_)
                | Attributes::ChildWorkflowInitiated(_)
                | Attributes::ChildCancelRequested(_)
                | Attributes::ExternalSignalInitiated(_)
                | Attributes::BudgetReservationRequested(_)
                | Attributes::BudgetReleased(_)
                | Attributes::StreamReadRequested(_)
                | Attributes::StreamAppended(_) => continue,
            };
            inputs.push(ActivationJob {
                event_id: id,
                job: Some(job),
            });
        }

        Ok(())
    }

    /// The run id from `workflow_started`.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// Adds an update request that is not in history yet (the server's pending updates):
    /// it is delivered, after the input jobs, in the final non-replayed activation, which
    /// then happens even when no input event is undelivered. Call before the first
    /// `next_activation`.
    pub fn add_pending_update(&mut self, job: DoUpdateJob) {
        self.pending_updates.push(ActivationJob {
            event_id: 0,
            job: Some(Job::DoUpdate(job)),
        });
    }

    /// Whether the outstanding (or last handed out) activation is a replay. False before
    /// the first activation.
    pub fn is_replaying(&self) -> bool {
        self.last_replaying
    }

    /// The next activation: one per recorded workflow task (replayed), then at most one
    /// final activation with every undelivered input event, then `None`.
    pub fn next_activation(&mut self) -> Result<Option<Activation>, UsageError> {
        match self.state {
            State::Replaying(_) | State::Final => return Err(UsageError::ActivationPending),
            State::Failed => return Err(UsageError::Failed),
            State::Done => return Ok(None),
            State::Idle => {}
        }

        if let Some(task) = self.tasks.get(self.next_task) {
            let (last_seen, timestamp) = (task.last_seen, task.workflow_time);
            let markers: Vec<RecordedMarker> = self.markers[task.markers.clone()]
                .iter_mut()
                .map(std::mem::take)
                .collect();
            let updates = task.updates.clone();
            let mut jobs = self.take_inputs_through(last_seen);
            jobs.extend(self.updates[updates].iter_mut().map(std::mem::take));
            self.state = State::Replaying(self.next_task);
            self.next_task += 1;
            self.last_replaying = true;
            let mut activation = self.activation(timestamp, true, jobs, last_seen);
            activation.markers = markers;
            return Ok(Some(activation));
        }

        if self.next_input < self.inputs.len() || !self.pending_updates.is_empty() {
            let mut jobs = self.take_inputs_through(i64::MAX);
            jobs.append(&mut self.pending_updates);
            self.state = State::Final;
            self.last_replaying = false;
            let through = self.known_events();
            return Ok(Some(self.activation(
                Some(self.task_time),
                false,
                jobs,
                through,
            )));
        }

        self.state = State::Done;
        self.release_delivered();
        Ok(None)
    }

    /// Frees what was indexed once everything is delivered: a machine kept for a
    /// continuation (a worker keeps up to `sticky_cache_size` of them) then holds only
    /// what is still to come, not a job per event of the run. A tail that starts with
    /// command events, continuing a group already replayed, is malformed after this and
    /// the caller replays from event 1, where it is judged.
    fn release_delivered(&mut self) {
        let (known, size) = (self.known_events(), self.history_bytes.last().copied());
        self.history_bytes = vec![size.unwrap_or(0)];
        self.bytes_from = known;
        self.tasks = Vec::new();
        self.recorded = Vec::new();
        self.markers = Vec::new();
        self.inputs = Vec::new();
        self.updates = Vec::new();
        self.next_task = 0;
        self.next_input = 0;
        self.in_command_group = false;
    }

    /// Hands back the commands produced for the outstanding activation. For a replayed
    /// activation they must match the task's recorded command events one-to-one, in
    /// order; for the final activation they are all new and kept.
    ///
    /// After a [`NondeterminismError`] the machine is failed and refuses further calls.
    pub fn complete_activation(
        &mut self,
        completion: ActivationCompletion,
    ) -> Result<(), ReplayError> {
        match self.state {
            State::Idle | State::Done => return Err(UsageError::NoActivation.into()),
            State::Failed => return Err(UsageError::Failed.into()),
            State::Replaying(_) | State::Final => {}
        }
        if let Some(bad) = completion.commands.iter().find(|c| c.kind.is_none()) {
            return Err(ReplayError::InvalidCommand(format!(
                "command with seq {} has no kind",
                bad.seq
            )));
        }

        match self.state {
            State::Replaying(task) => {
                let range = self.tasks[task].commands.clone();
                if let Err(e) = match_commands(&self.recorded[range], &completion.commands) {
                    self.state = State::Failed;
                    return Err(e.into());
                }
                self.state = State::Idle;
            }
            _ => {
                self.new_commands.extend(completion.commands);
                self.state = State::Idle;
            }
        }
        Ok(())
    }

    /// The commands of the final activation (the ones to send to the server). Drains
    /// them: a second call returns nothing.
    pub fn take_new_commands(&mut self) -> Vec<Command> {
        std::mem::take(&mut self.new_commands)
    }

    /// Takes the undelivered input jobs with `event_id <= last_seen`.
    fn take_inputs_through(&mut self, last_seen: i64) -> Vec<ActivationJob> {
        let start = self.next_input;
        let mut end = start;
        while end < self.inputs.len() && self.inputs[end].event_id <= last_seen {
            end += 1;
        }
        self.next_input = end;
        self.inputs[start..end]
            .iter_mut()
            .map(std::mem::take)
            .collect()
    }

    fn activation(
        &self,
        timestamp: Option<Timestamp>,
        is_replaying: bool,
        jobs: Vec<ActivationJob>,
        through_event_id: i64,
    ) -> Activation {
        // A marker's last_seen_event_id is checked to lie within the history in `new`.
        let through = through_event_id.clamp(self.bytes_from, self.known_events());
        Activation {
            run_id: self.run_id.clone(),
            timestamp,
            is_replaying,
            jobs,
            history_length: through,
            history_size_bytes: self.history_bytes[(through - self.bytes_from) as usize],
            ..Activation::default()
        }
    }
}

/// A timestamp in whole milliseconds: workers are handed the task time in ms.
fn millis(t: Timestamp) -> i64 {
    t.seconds * 1000 + i64::from(t.nanos) / 1_000_000
}

/// The job resolving child `seq` that closed with `status` (not completed).
fn child_closed(seq: i64, status: &str, run_id: String, failure: Option<Failure>) -> Job {
    Job::ResolveChildWorkflow(ResolveChildWorkflowJob {
        seq,
        status: status.to_owned(),
        run_id,
        outcome: Some(resolve_child_workflow_job::Outcome::Failed(
            failure.unwrap_or_default(),
        )),
    })
}

/// Matches produced commands against recorded command events, one-to-one in order.
///
/// A recorded patch marker the code does not produce at that point is skipped: code
/// whose `deprecate_patch()` call was deleted must still replay histories recorded
/// with it. The runtime emits a patch marker during replay only when the task recorded
/// one, so a produced patch marker is never skipped.
fn match_commands(recorded: &[Recorded], produced: &[Command]) -> Result<(), NondeterminismError> {
    let (mut r, mut p) = (0, 0);
    while r < recorded.len() || p < produced.len() {
        let expected = recorded.get(r);
        let command = produced.get(p);
        let actual = command.and_then(Recorded::from_command);
        if expected == actual.as_ref() {
            r += 1;
            p += 1;
            continue;
        }
        if expected.is_some_and(Recorded::is_patch) {
            r += 1;
            continue;
        }
        let seq = expected
            .and_then(Recorded::seq)
            .or_else(|| command.map(|c| actual.as_ref().and_then(Recorded::seq).unwrap_or(c.seq)))
            .unwrap_or(0);
        return Err(NondeterminismError {
            seq,
            expected: expected.map_or_else(|| NOTHING.to_owned(), ToString::to_string),
            actual: actual.map_or_else(|| NOTHING.to_owned(), |a| a.to_string()),
        });
    }
    Ok(())
}
