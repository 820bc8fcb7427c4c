//! Replay machine tests over small hand-built histories.

use prost_types::{Duration, Timestamp};

use super::*;
use crate::proto::activation_job::Job;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::resolve_activity_job::Outcome;
use crate::proto::{
    Activation, ActivationCompletion, ActivityCompleted, ActivityFailed, ActivityScheduled,
    CancelRequested, CancelTimer, CancelWorkflow, Command, CompleteWorkflow, Failure, History,
    HistoryEvent, Payload, ScheduleActivity, SignalReceived, StartTimer, TimerCancelled,
    TimerFired, TimerStarted, WorkflowCancelled, WorkflowCompleted, WorkflowStarted,
    WorkflowTaskCompleted, WorkflowTerminated,
};

const RUN_ID: &str = "run-1";

fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

fn payload(bytes: &[u8]) -> Payload {
    Payload {
        data: bytes.to_vec(),
        external: None,
        metadata: Default::default(),
    }
}

/// Builds a history event by event; ids are assigned 1..N.
struct HistoryBuilder {
    events: Vec<HistoryEvent>,
}

impl HistoryBuilder {
    fn started() -> Self {
        let mut b = HistoryBuilder { events: Vec::new() };
        b.push(Attributes::WorkflowStarted(WorkflowStarted {
            workflow_type: "order".into(),
            workflow_version: "1".into(),
            workflow_id: "wf-1".into(),
            run_id: RUN_ID.into(),
            input: Some(payload(b"args")),
            ..Default::default()
        }));
        b
    }

    fn empty() -> Self {
        HistoryBuilder { events: Vec::new() }
    }

    fn push(&mut self, attrs: Attributes) -> i64 {
        let id = self.events.len() as i64 + 1;
        self.events.push(HistoryEvent {
            event_id: id,
            event_time: Some(ts(1000 + id)),
            attributes: Some(attrs),
        });
        id
    }

    fn last_id(&self) -> i64 {
        self.events.len() as i64
    }

    /// A marker that saw everything before it.
    fn task_done(&mut self, time: i64) -> &mut Self {
        let last_seen = self.last_id();
        self.marker(last_seen, time)
    }

    fn marker(&mut self, last_seen: i64, time: i64) -> &mut Self {
        self.push(Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
            last_seen_event_id: last_seen,
            workflow_time: Some(ts(time)),
            worker_id: "w1".into(),
            build_id: "b1".into(),
        }));
        self
    }

    fn scheduled(&mut self, seq: i64, activity_type: &str) -> &mut Self {
        self.push(Attributes::ActivityScheduled(ActivityScheduled {
            seq,
            activity_type: activity_type.into(),
            input: Some(payload(b"in")),
            ..Default::default()
        }));
        self
    }

    fn completed(&mut self, seq: i64, result: &[u8]) -> &mut Self {
        self.push(Attributes::ActivityCompleted(ActivityCompleted {
            seq,
            result: Some(payload(result)),
            attempt: 1,
            worker_id: "w1".into(),
            fencing_token: 1,
        }));
        self
    }

    fn failed(&mut self, seq: i64, message: &str, ambiguous: bool) -> &mut Self {
        self.push(Attributes::ActivityFailed(ActivityFailed {
            seq,
            failure: Some(Failure {
                message: message.into(),
                r#type: "ValueError".into(),
                ..Default::default()
            }),
            attempt: 3,
            worker_id: "w1".into(),
            fencing_token: 7,
            ambiguous,
        }));
        self
    }

    fn timer_started(&mut self, seq: i64, seconds: i64) -> &mut Self {
        self.push(Attributes::TimerStarted(TimerStarted {
            seq,
            duration: Some(Duration { seconds, nanos: 0 }),
        }));
        self
    }

    fn timer_fired(&mut self, seq: i64) -> &mut Self {
        self.push(Attributes::TimerFired(TimerFired { seq }));
        self
    }

    fn timer_cancelled(&mut self, seq: i64) -> &mut Self {
        self.push(Attributes::TimerCancelled(TimerCancelled { seq }));
        self
    }

    fn signal(&mut self, name: &str) -> &mut Self {
        self.push(Attributes::SignalReceived(SignalReceived {
            signal_name: name.into(),
            input: Some(payload(name.as_bytes())),
            request_id: format!("req-{name}"),
        }));
        self
    }

    fn cancel_requested(&mut self, reason: &str) -> &mut Self {
        self.push(Attributes::CancelRequested(CancelRequested {
            reason: reason.into(),
            ..Default::default()
        }));
        self
    }

    fn workflow_completed(&mut self) -> &mut Self {
        self.push(Attributes::WorkflowCompleted(WorkflowCompleted {
            result: None,
        }));
        self
    }

    fn workflow_cancelled(&mut self) -> &mut Self {
        self.push(Attributes::WorkflowCancelled(WorkflowCancelled {}));
        self
    }

    fn terminated(&mut self) -> &mut Self {
        self.push(Attributes::WorkflowTerminated(WorkflowTerminated {
            reason: "ops".into(),
        }));
        self
    }

    fn build(&self) -> History {
        History {
            events: self.events.clone(),
        }
    }

    fn machine(&self) -> ReplayMachine {
        ReplayMachine::new(self.build(), ts(9999)).expect("well-formed history")
    }
}

fn schedule(seq: i64, activity_type: &str) -> Command {
    Command {
        seq,
        kind: Some(Kind::ScheduleActivity(ScheduleActivity {
            activity_type: activity_type.into(),
            input: Some(payload(b"in")),
            ..Default::default()
        })),
    }
}

fn start_timer(seq: i64, seconds: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::StartTimer(StartTimer {
            duration: Some(Duration { seconds, nanos: 0 }),
        })),
    }
}

fn cancel_timer(seq: i64, timer_seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::CancelTimer(CancelTimer { timer_seq })),
    }
}

fn complete(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::CompleteWorkflow(CompleteWorkflow {
            result: Some(payload(b"ok")),
        })),
    }
}

fn cancel_workflow(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::CancelWorkflow(CancelWorkflow {})),
    }
}

fn completion(commands: Vec<Command>) -> ActivationCompletion {
    ActivationCompletion { commands }
}

fn next(m: &mut ReplayMachine) -> Activation {
    m.next_activation()
        .expect("no usage error")
        .expect("an activation")
}

fn job_event_ids(a: &Activation) -> Vec<i64> {
    a.jobs.iter().map(|j| j.event_id).collect()
}

fn nondeterminism(err: ReplayError) -> NondeterminismError {
    match err {
        ReplayError::Nondeterminism(e) => e,
        other => panic!("expected nondeterminism, got {other:?}"),
    }
}

fn malformed(b: &HistoryBuilder) -> MalformedHistory {
    ReplayMachine::new(b.build(), ts(0)).expect_err("malformed history")
}

/// 1 started, 2 marker, 3 sched(1,charge), 4 completed(1), 5 marker, 6 sched(2,ship),
/// 7 completed(2), 8 marker, 9 workflow_completed.
fn two_activities() -> HistoryBuilder {
    let mut b = HistoryBuilder::started();
    b.task_done(100).scheduled(1, "charge");
    b.completed(1, b"receipt")
        .task_done(200)
        .scheduled(2, "ship");
    b.completed(2, b"tracking")
        .task_done(300)
        .workflow_completed();
    b
}

#[test]
fn two_activity_history_replays_without_new_commands() {
    let mut m = two_activities().machine();

    let a1 = next(&mut m);
    assert!(a1.is_replaying);
    assert!(m.is_replaying());
    assert_eq!(a1.run_id, RUN_ID);
    assert_eq!(a1.timestamp, Some(ts(100)));
    assert_eq!(job_event_ids(&a1), vec![1]);
    match a1.jobs[0].job.as_ref().unwrap() {
        Job::StartWorkflow(s) => {
            assert_eq!(s.workflow_type, "order");
            assert_eq!(s.run_id, RUN_ID);
            assert_eq!(s.input, Some(payload(b"args")));
        }
        other => panic!("unexpected job {other:?}"),
    }
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();

    let a2 = next(&mut m);
    assert_eq!(a2.timestamp, Some(ts(200)));
    assert_eq!(job_event_ids(&a2), vec![4]);
    match a2.jobs[0].job.as_ref().unwrap() {
        Job::ResolveActivity(r) => {
            assert_eq!(r.seq, 1);
            assert_eq!(r.attempt, 1);
            assert!(!r.ambiguous);
            assert_eq!(r.outcome, Some(Outcome::Completed(payload(b"receipt"))));
        }
        other => panic!("unexpected job {other:?}"),
    }
    m.complete_activation(completion(vec![schedule(2, "ship")]))
        .unwrap();

    let a3 = next(&mut m);
    assert_eq!(job_event_ids(&a3), vec![7]);
    m.complete_activation(completion(vec![complete(3)]))
        .unwrap();

    assert_eq!(m.next_activation(), Ok(None));
    assert_eq!(m.next_activation(), Ok(None));
    assert!(m.take_new_commands().is_empty());
}

#[test]
fn activations_carry_the_history_their_task_saw() {
    let mut b = HistoryBuilder::started();
    b.task_done(100).scheduled(1, "charge");
    b.completed(1, b"a receipt of some length");
    let sizes: Vec<i64> = b
        .events
        .iter()
        .map(|e| prost::Message::encoded_len(e) as i64)
        .collect();
    let mut m = b.machine();

    // The replayed task saw event 1 only; the live one sees all four.
    let a1 = next(&mut m);
    assert_eq!((a1.history_length, a1.history_size_bytes), (1, sizes[0]));
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    let a2 = next(&mut m);
    assert_eq!(a2.history_length, 4);
    assert_eq!(a2.history_size_bytes, sizes.iter().sum::<i64>());
}

#[test]
fn final_activation_returns_new_commands() {
    let mut b = HistoryBuilder::started();
    b.task_done(100).scheduled(1, "charge");
    b.completed(1, b"receipt");
    let mut m = b.machine();

    let a1 = next(&mut m);
    assert!(a1.is_replaying);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();

    let a2 = next(&mut m);
    assert!(!a2.is_replaying);
    assert!(!m.is_replaying());
    assert_eq!(a2.timestamp, Some(ts(9999)));
    assert_eq!(job_event_ids(&a2), vec![4]);
    m.complete_activation(completion(vec![schedule(2, "ship"), start_timer(3, 60)]))
        .unwrap();

    assert_eq!(m.next_activation(), Ok(None));
    assert_eq!(
        m.take_new_commands(),
        vec![schedule(2, "ship"), start_timer(3, 60)]
    );
    assert!(m.take_new_commands().is_empty());
}

#[test]
fn brand_new_run_has_one_final_activation_with_start() {
    let mut m = HistoryBuilder::started().machine();
    let a = next(&mut m);
    assert!(!a.is_replaying);
    assert_eq!(job_event_ids(&a), vec![1]);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    assert_eq!(m.next_activation(), Ok(None));
    assert_eq!(m.take_new_commands(), vec![schedule(1, "charge")]);
}

#[test]
fn signal_arriving_mid_task_is_delivered_in_the_next_activation() {
    // 1 started, 2 signal "a" (arrives while task 1 runs: last_seen = 1),
    // 3 marker(last_seen=1), 4 sched(1), 5 completed(1), 6 marker(last_seen=5)
    let mut b = HistoryBuilder::started();
    b.signal("a").marker(1, 100).scheduled(1, "charge");
    b.completed(1, b"r").task_done(200);
    let mut m = b.machine();

    let a1 = next(&mut m);
    assert_eq!(job_event_ids(&a1), vec![1]);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();

    let a2 = next(&mut m);
    assert!(a2.is_replaying);
    assert_eq!(job_event_ids(&a2), vec![2, 5]);
    match a2.jobs[0].job.as_ref().unwrap() {
        Job::SignalWorkflow(s) => {
            assert_eq!(s.signal_name, "a");
            assert_eq!(s.input, Some(payload(b"a")));
        }
        other => panic!("unexpected job {other:?}"),
    }
    m.complete_activation(completion(vec![])).unwrap();
    assert_eq!(m.next_activation(), Ok(None));
}

#[test]
fn signal_after_last_marker_goes_to_the_final_activation() {
    // The signal arrives during the last task: the last marker did not see it.
    let mut b = HistoryBuilder::started();
    b.signal("late").marker(1, 100).scheduled(1, "charge");
    let mut m = b.machine();

    let a1 = next(&mut m);
    assert_eq!(job_event_ids(&a1), vec![1]);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();

    let a2 = next(&mut m);
    assert!(!a2.is_replaying);
    assert_eq!(job_event_ids(&a2), vec![2]);
}

#[test]
fn activity_type_mismatch_is_nondeterminism() {
    let mut m = two_activities().machine();
    next(&mut m);
    let err = nondeterminism(
        m.complete_activation(completion(vec![schedule(1, "refund")]))
            .unwrap_err(),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "ScheduleActivity(seq=1, type=\"charge\")");
    assert_eq!(err.actual, "ScheduleActivity(seq=1, type=\"refund\")");
    assert_eq!(
        err.to_string(),
        "nondeterminism at seq 1: expected ScheduleActivity(seq=1, type=\"charge\"), got \
         ScheduleActivity(seq=1, type=\"refund\")"
    );
    // The machine is failed now.
    assert_eq!(m.next_activation(), Err(UsageError::Failed));
}

#[test]
fn activity_seq_mismatch_is_nondeterminism() {
    let mut m = two_activities().machine();
    next(&mut m);
    let err = nondeterminism(
        m.complete_activation(completion(vec![schedule(5, "charge")]))
            .unwrap_err(),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.actual, "ScheduleActivity(seq=5, type=\"charge\")");
}

#[test]
fn extra_command_is_nondeterminism() {
    let mut m = two_activities().machine();
    next(&mut m);
    let err = nondeterminism(
        m.complete_activation(completion(vec![schedule(1, "charge"), start_timer(2, 5)]))
            .unwrap_err(),
    );
    assert_eq!(err.seq, 2);
    assert_eq!(err.expected, "nothing");
    assert_eq!(err.actual, "StartTimer(seq=2, duration=5s)");
}

#[test]
fn missing_command_is_nondeterminism() {
    // The code no longer schedules the second activity.
    let mut m = two_activities().machine();
    next(&mut m);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    next(&mut m);
    let err = nondeterminism(m.complete_activation(completion(vec![])).unwrap_err());
    assert_eq!(err.seq, 2);
    assert_eq!(err.expected, "ScheduleActivity(seq=2, type=\"ship\")");
    assert_eq!(err.actual, "nothing");
}

#[test]
fn missing_workflow_completion_is_nondeterminism() {
    let mut m = two_activities().machine();
    next(&mut m);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    next(&mut m);
    m.complete_activation(completion(vec![schedule(2, "ship")]))
        .unwrap();
    next(&mut m);
    let err = nondeterminism(
        m.complete_activation(completion(vec![schedule(3, "notify")]))
            .unwrap_err(),
    );
    assert_eq!(err.seq, 3);
    assert_eq!(err.expected, "CompleteWorkflow");
    assert_eq!(err.actual, "ScheduleActivity(seq=3, type=\"notify\")");
}

#[test]
fn timer_replays_and_checks_duration() {
    // 1 started, 2 marker, 3 timer_started(1, 30s), 4 timer_fired(1), 5 marker, 6 completed
    let mut b = HistoryBuilder::started();
    b.task_done(100).timer_started(1, 30);
    b.timer_fired(1).task_done(130).workflow_completed();

    let mut m = b.machine();
    next(&mut m);
    m.complete_activation(completion(vec![start_timer(1, 30)]))
        .unwrap();
    let a2 = next(&mut m);
    assert_eq!(
        a2.jobs[0].job,
        Some(Job::FireTimer(crate::proto::FireTimerJob { seq: 1 }))
    );
    m.complete_activation(completion(vec![complete(2)]))
        .unwrap();
    assert_eq!(m.next_activation(), Ok(None));

    let mut m = b.machine();
    next(&mut m);
    let err = nondeterminism(
        m.complete_activation(completion(vec![start_timer(1, 45)]))
            .unwrap_err(),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "StartTimer(seq=1, duration=30s)");
    assert_eq!(err.actual, "StartTimer(seq=1, duration=45s)");
}

#[test]
fn cancel_timer_matches_by_timer_seq() {
    // 1 started, 2 marker, 3 timer_started(1), 4 signal, 5 marker, 6 timer_cancelled(1)
    let mut b = HistoryBuilder::started();
    b.task_done(100).timer_started(1, 3600);
    b.signal("stop")
        .task_done(200)
        .timer_cancelled(1)
        .workflow_completed();

    let mut m = b.machine();
    next(&mut m);
    m.complete_activation(completion(vec![start_timer(1, 3600)]))
        .unwrap();
    next(&mut m);
    m.complete_activation(completion(vec![cancel_timer(2, 1), complete(3)]))
        .unwrap();
    assert_eq!(m.next_activation(), Ok(None));

    let mut m = b.machine();
    next(&mut m);
    m.complete_activation(completion(vec![start_timer(1, 3600)]))
        .unwrap();
    next(&mut m);
    let err = nondeterminism(
        m.complete_activation(completion(vec![cancel_timer(2, 9), complete(3)]))
            .unwrap_err(),
    );
    assert_eq!(err.seq, 1);
    assert_eq!(err.expected, "CancelTimer(timer_seq=1)");
    assert_eq!(err.actual, "CancelTimer(timer_seq=9)");
}

#[test]
fn cancel_request_becomes_a_cancel_job_and_cancelled_workflow_matches() {
    let mut b = HistoryBuilder::started();
    b.task_done(100).scheduled(1, "charge");
    b.cancel_requested("user asked")
        .task_done(200)
        .workflow_cancelled();

    let mut m = b.machine();
    next(&mut m);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    let a2 = next(&mut m);
    assert_eq!(
        a2.jobs[0].job,
        Some(Job::CancelWorkflow(crate::proto::CancelWorkflowJob {
            reason: "user asked".into(),
            // The CancelRequested event's time (event 4: 1000 + its id).
            requested_at: Some(ts(1004)),
            ..Default::default()
        }))
    );
    m.complete_activation(completion(vec![cancel_workflow(2)]))
        .unwrap();
    assert_eq!(m.next_activation(), Ok(None));

    let mut m = b.machine();
    next(&mut m);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    next(&mut m);
    let err = nondeterminism(
        m.complete_activation(completion(vec![complete(2)]))
            .unwrap_err(),
    );
    assert_eq!(err.expected, "CancelWorkflow");
    assert_eq!(err.actual, "CompleteWorkflow");
    assert_eq!(err.seq, 2);
}

#[test]
fn failed_activity_carries_failure_attempt_and_ambiguity() {
    let mut b = HistoryBuilder::started();
    b.task_done(100).scheduled(1, "charge");
    b.failed(1, "lease expired", true);
    let mut m = b.machine();
    next(&mut m);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    let a2 = next(&mut m);
    match a2.jobs[0].job.as_ref().unwrap() {
        Job::ResolveActivity(r) => {
            assert_eq!(r.seq, 1);
            assert_eq!(r.attempt, 3);
            assert!(r.ambiguous);
            match r.outcome.as_ref().unwrap() {
                Outcome::Failed(f) => assert_eq!(f.message, "lease expired"),
                other => panic!("unexpected outcome {other:?}"),
            }
        }
        other => panic!("unexpected job {other:?}"),
    }
}

#[test]
fn terminated_yields_no_job() {
    let mut b = HistoryBuilder::started();
    b.task_done(100).scheduled(1, "charge");
    b.terminated();
    let mut m = b.machine();
    next(&mut m);
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
    assert_eq!(m.next_activation(), Ok(None));
}

#[test]
fn usage_errors_are_reported() {
    let mut m = two_activities().machine();
    assert_eq!(
        m.complete_activation(completion(vec![])),
        Err(ReplayError::Usage(UsageError::NoActivation))
    );
    next(&mut m);
    assert_eq!(m.next_activation(), Err(UsageError::ActivationPending));
    let bad = Command { seq: 1, kind: None };
    assert!(matches!(
        m.complete_activation(completion(vec![bad])),
        Err(ReplayError::InvalidCommand(_))
    ));
    // Still outstanding after an invalid completion.
    m.complete_activation(completion(vec![schedule(1, "charge")]))
        .unwrap();
}

#[test]
fn malformed_histories_are_structured_errors() {
    let empty = HistoryBuilder::empty();
    assert!(malformed(&empty).message.contains("empty"));

    let mut no_start = HistoryBuilder::empty();
    no_start.signal("x");
    assert!(malformed(&no_start)
        .message
        .contains("event 1 must be workflow_started"));

    let mut orphan = HistoryBuilder::started();
    orphan.scheduled(1, "charge");
    let err = malformed(&orphan);
    assert!(
        err.message
            .contains("not preceded by a workflow_task_completed"),
        "{err}"
    );

    let mut interrupted = HistoryBuilder::started();
    interrupted
        .task_done(100)
        .scheduled(1, "a")
        .signal("s")
        .scheduled(2, "b");
    assert!(malformed(&interrupted).message.contains("event 5"));

    let mut future = HistoryBuilder::started();
    future.marker(5, 100);
    assert!(malformed(&future).message.contains("last_seen_event_id 5"));

    let mut self_seen = HistoryBuilder::started();
    self_seen.marker(2, 100);
    assert!(malformed(&self_seen)
        .message
        .contains("not before the marker"));

    let mut zero = HistoryBuilder::started();
    zero.marker(0, 100);
    assert!(malformed(&zero).message.contains("at least event 1"));

    let mut backwards = HistoryBuilder::started();
    backwards.signal("a").marker(2, 100).marker(1, 200);
    assert!(malformed(&backwards)
        .message
        .contains("before the previous marker"));

    let mut gap = HistoryBuilder::started();
    gap.task_done(100);
    let mut history = gap.build();
    history.events[1].event_id = 3;
    let err = ReplayMachine::new(history, ts(0)).unwrap_err();
    assert!(err.message.contains("event_id 3"));

    let mut blank = HistoryBuilder::started();
    blank.task_done(100);
    let mut history = blank.build();
    history.events[1].attributes = None;
    let err = ReplayMachine::new(history, ts(0)).unwrap_err();
    assert!(err.message.contains("no attributes"));

    let mut twice = HistoryBuilder::started();
    twice.push(Attributes::WorkflowStarted(WorkflowStarted::default()));
    assert!(malformed(&twice)
        .message
        .contains("second workflow_started"));
}

#[test]
fn long_history_replays_in_linear_time() {
    // 20k activities, one per task; a quadratic scan would be visibly slow here.
    let n = 20_000;
    let mut b = HistoryBuilder::started();
    b.task_done(1).scheduled(1, "step");
    for seq in 1..n {
        b.completed(seq, b"r")
            .task_done(1 + seq)
            .scheduled(seq + 1, "step");
    }
    let mut m = b.machine();
    let mut seq = 1;
    while let Some(_a) = m.next_activation().unwrap() {
        let cmds = if seq <= n {
            vec![schedule(seq, "step")]
        } else {
            vec![]
        };
        m.complete_activation(completion(cmds)).unwrap();
        seq += 1;
    }
    assert_eq!(seq, n + 1);
}
