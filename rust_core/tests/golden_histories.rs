//! Golden histories shared with pytest (`tests/fixtures/histories`, recorded from
//! `tests/testing/golden_workflows.py` by `scripts/gen_golden_histories.py`).
//!
//! pytest replays the JSON form through the real Python workflow code; this test feeds
//! the binary `.pb` form to the `ReplayMachine` directly, answering each activation with
//! the commands the history recorded for it, and checks the activations and commands
//! against what those workflows do. A divergent answer must yield the same
//! `(seq, expected, actual)` the Python replayer reports.

use std::path::PathBuf;

use prost::Message;
use prost_types::{Duration, Timestamp};

use _core::proto::activation_job::Job;
use _core::proto::command::Kind;
use _core::proto::history_event::Attributes;
use _core::proto::resolve_activity_job::Outcome;
use _core::proto::{
    Activation, ActivationCompletion, Command, CompleteWorkflow, History, RecordMarker,
    ScheduleActivity, StartTimer,
};
use _core::replay::{NondeterminismError, ReplayError, ReplayMachine};

fn load(name: &str) -> History {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "tests",
        "fixtures",
        "histories",
    ]
    .iter()
    .collect::<PathBuf>()
    .join(format!("{name}.pb"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    History::decode(bytes.as_slice()).expect("a serialized History")
}

fn last_time(history: &History) -> Timestamp {
    history
        .events
        .last()
        .and_then(|e| e.event_time)
        .expect("events have times")
}

/// The commands recorded after each `workflow_task_completed` marker, in order.
fn recorded_commands(history: &History) -> Vec<Vec<Command>> {
    let mut tasks: Vec<Vec<Command>> = Vec::new();
    for event in &history.events {
        let command = match event.attributes.as_ref() {
            Some(Attributes::WorkflowTaskCompleted(_)) => {
                tasks.push(Vec::new());
                continue;
            }
            Some(Attributes::ActivityScheduled(a)) => Command {
                seq: a.seq,
                kind: Some(Kind::ScheduleActivity(ScheduleActivity {
                    activity_type: a.activity_type.clone(),
                    input: a.input.clone(),
                    task_queue: a.task_queue.clone(),
                    options: a.options.clone(),
                    ..Default::default()
                })),
            },
            Some(Attributes::TimerStarted(t)) => Command {
                seq: t.seq,
                kind: Some(Kind::StartTimer(StartTimer {
                    duration: t.duration,
                })),
            },
            Some(Attributes::MarkerRecorded(m)) => Command {
                seq: m.seq,
                kind: Some(Kind::RecordMarker(RecordMarker {
                    kind: m.kind.clone(),
                    id: m.id.clone(),
                    payload: m.payload.clone(),
                    details: m.details.clone(),
                })),
            },
            Some(Attributes::WorkflowCompleted(c)) => Command {
                seq: 0,
                kind: Some(Kind::CompleteWorkflow(CompleteWorkflow {
                    result: c.result.clone(),
                })),
            },
            _ => continue,
        };
        tasks.last_mut().expect("a marker first").push(command);
    }
    tasks
}

fn describe_jobs(activation: &Activation) -> Vec<String> {
    activation
        .jobs
        .iter()
        .map(|job| match job.job.as_ref().expect("a job") {
            Job::StartWorkflow(s) => format!("start {}", s.workflow_type),
            Job::ResolveActivity(r) => match r.outcome {
                Some(Outcome::Completed(_)) => format!("activity {} ok #{}", r.seq, r.attempt),
                _ => format!("activity {} failed #{}", r.seq, r.attempt),
            },
            Job::FireTimer(t) => format!("timer {}", t.seq),
            Job::SignalWorkflow(s) => format!("signal {}", s.signal_name),
            Job::CancelWorkflow(_) => "cancel".to_owned(),
            Job::DoUpdate(u) => format!("update:{}", u.update_id),
            Job::ResolveChildWorkflowStart(c) => format!("child {} started", c.seq),
            Job::ResolveChildWorkflow(c) => format!("child {} {}", c.seq, c.status),
            Job::ResolveSignalExternal(s) => format!("signal {} sent", s.seq),
            Job::ResolveBudget(b) => format!("budget {} resolved", b.seq),
            Job::ResolveStreamRead(r) => format!("stream read {} ({} items)", r.seq, r.items.len()),
        })
        .collect()
}

fn describe_command(command: &Command) -> String {
    match command.kind.as_ref().expect("a kind") {
        Kind::ScheduleActivity(a) => format!("schedule {} {}", command.seq, a.activity_type),
        Kind::StartTimer(t) => {
            let seconds = t.duration.map_or(0, |d| d.seconds);
            format!("timer {} {seconds}s", command.seq)
        }
        Kind::CompleteWorkflow(_) => "complete".to_owned(),
        Kind::RecordMarker(m) => format!("marker {} {} {:?}", command.seq, m.kind, m.id),
        other => format!("{other:?}"),
    }
}

/// Replays `name` answering every activation with its recorded commands; returns, per
/// activation, (jobs, commands).
fn replay_recorded(name: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let history = load(name);
    let mut answers = recorded_commands(&history).into_iter();
    let mut machine = ReplayMachine::new(history.clone(), last_time(&history)).expect("valid");
    let mut seen = Vec::new();
    while let Some(activation) = machine.next_activation().expect("no usage error") {
        assert!(activation.is_replaying, "{name}: every task is recorded");
        let commands = answers.next().expect("a recorded task per activation");
        seen.push((
            describe_jobs(&activation),
            commands.iter().map(describe_command).collect(),
        ));
        machine
            .complete_activation(ActivationCompletion { commands })
            .expect("recorded commands match");
    }
    assert!(
        answers.next().is_none(),
        "{name}: every recorded task replayed"
    );
    assert!(
        machine.take_new_commands().is_empty(),
        "{name}: run is closed"
    );
    seen
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn hello_world_with_a_retried_activity() {
    assert_eq!(
        replay_recorded("hello_world"),
        vec![
            (
                strings(&["start GoldenHello"]),
                strings(&["schedule 1 say_hello"])
            ),
            (
                strings(&["activity 1 ok #1"]),
                strings(&["schedule 2 say_goodbye"])
            ),
            (strings(&["activity 2 ok #2"]), strings(&["complete"])),
        ]
    );
}

#[test]
fn timer() {
    assert_eq!(
        replay_recorded("timer"),
        vec![
            (
                strings(&["start GoldenTimer"]),
                strings(&["timer 1 86400s"])
            ),
            (strings(&["timer 1"]), strings(&["complete"])),
        ]
    );
}

#[test]
fn signal() {
    assert_eq!(
        replay_recorded("signal"),
        vec![
            (strings(&["start GoldenSignal"]), strings(&[])),
            (
                strings(&["signal approve"]),
                strings(&["schedule 1 say_hello"])
            ),
            (strings(&["activity 1 ok #1"]), strings(&["complete"])),
        ]
    );
}

#[test]
fn markers() {
    let history = load("markers");
    let mut machine = ReplayMachine::new(history.clone(), last_time(&history)).expect("valid");
    let first = machine.next_activation().expect("ok").expect("start");
    let recorded: Vec<(i64, &str, &str)> = first
        .markers
        .iter()
        .map(|m| (m.seq, m.kind.as_str(), m.id.as_str()))
        .collect();
    assert_eq!(
        recorded,
        vec![(1, "side_effect", ""), (0, "patch", "polite")]
    );
    assert!(
        first.markers[0].payload.is_some(),
        "the side-effect value is handed back"
    );
    assert_eq!(
        replay_recorded("markers"),
        vec![
            (
                strings(&["start GoldenMarkers"]),
                strings(&[
                    "marker 1 side_effect \"\"",
                    "marker 0 patch \"polite\"",
                    "schedule 2 say_hello"
                ])
            ),
            (
                strings(&["activity 2 ok #1"]),
                strings(&["marker 3 side_effect \"\"", "complete"])
            ),
        ]
    );
}

/// The same divergence tests/testing/test_replayer.py checks through Python code.
#[test]
fn a_longer_timer_diverges_at_its_seq() {
    let history = load("timer");
    let mut machine = ReplayMachine::new(history.clone(), last_time(&history)).expect("valid");
    machine.next_activation().expect("ok").expect("start");
    let longer = Command {
        seq: 1,
        kind: Some(Kind::StartTimer(StartTimer {
            duration: Some(Duration {
                seconds: 172_800,
                nanos: 0,
            }),
        })),
    };
    let err = machine
        .complete_activation(ActivationCompletion {
            commands: vec![longer],
        })
        .expect_err("diverges");
    assert_eq!(
        err,
        ReplayError::Nondeterminism(NondeterminismError {
            seq: 1,
            expected: "StartTimer(seq=1, duration=86400s)".into(),
            actual: "StartTimer(seq=1, duration=172800s)".into(),
        })
    );
}
