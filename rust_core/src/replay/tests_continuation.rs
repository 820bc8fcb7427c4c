//! A machine continued with the events after its decision (sticky execution) delivers
//! exactly what a replay of the whole history delivers, and refuses any tail that does
//! not record its decision.

use prost::Message;
use prost_types::{Duration, Timestamp};

use super::bench::{recorded_completions, replay_echo, replay_with};
use super::test_support::{marker, numbered, ts};
use super::*;
use crate::proto::command::Kind;
use crate::proto::history_event::Attributes;
use crate::proto::{
    Activation, ActivationCompletion, ActivityCompleted, ActivityScheduled, Command, History,
    HistoryEvent, ScheduleActivity, SignalReceived, StartTimer, TimerFired, TimerStarted,
    WorkflowStarted, WorkflowTaskCompleted,
};

fn started() -> Attributes {
    Attributes::WorkflowStarted(WorkflowStarted {
        workflow_type: "order".into(),
        run_id: "run-1".into(),
        ..Default::default()
    })
}

fn scheduled(seq: i64) -> Attributes {
    Attributes::ActivityScheduled(ActivityScheduled {
        seq,
        activity_type: "charge".into(),
        ..Default::default()
    })
}

fn completed(seq: i64) -> Attributes {
    Attributes::ActivityCompleted(ActivityCompleted {
        seq,
        ..Default::default()
    })
}

fn signal(name: &str) -> Attributes {
    Attributes::SignalReceived(SignalReceived {
        signal_name: name.into(),
        ..Default::default()
    })
}

fn timer_started(seconds: i64) -> Attributes {
    Attributes::TimerStarted(TimerStarted {
        seq: 2,
        duration: Some(Duration { seconds, nanos: 0 }),
    })
}

fn schedule(seq: i64) -> Command {
    Command {
        seq,
        kind: Some(Kind::ScheduleActivity(ScheduleActivity {
            activity_type: "charge".into(),
            ..Default::default()
        })),
    }
}

fn start_timer(seconds: i64) -> Command {
    Command {
        seq: 2,
        kind: Some(Kind::StartTimer(StartTimer {
            duration: Some(Duration { seconds, nanos: 0 }),
        })),
    }
}

/// Events 1..=5: the start, the first task scheduling `charge`, a signal and the result.
fn prefix() -> Vec<Attributes> {
    vec![
        started(),
        marker(1),
        scheduled(1),
        signal("s1"),
        completed(1),
    ]
}

/// The events after `prefix`'s, numbered on from event `prefix().len() + 1`.
fn tail(events: Vec<Attributes>) -> History {
    let after = prefix().len() as i64;
    let mut h = numbered(events);
    for e in &mut h.events {
        e.event_id += after;
    }
    h
}

/// A machine that replayed `prefix` and decided its final activation (at the test
/// marker's time, 100 s) with `start_timer(5)`.
fn decided() -> ReplayMachine {
    let mut m = ReplayMachine::new(numbered(prefix()), ts(100)).unwrap();
    m.next_activation().unwrap().unwrap();
    m.complete_activation(ActivationCompletion {
        commands: vec![schedule(1)],
    })
    .unwrap();
    let last = m.next_activation().unwrap().unwrap();
    assert!(!last.is_replaying);
    m.complete_activation(ActivationCompletion {
        commands: vec![start_timer(5)],
    })
    .unwrap();
    assert_eq!(m.take_new_commands(), vec![start_timer(5)]);
    assert!(m.next_activation().unwrap().is_none());
    // Everything was delivered: nothing indexed is kept.
    assert_eq!(m.retained(), 0);
    m
}

/// Every activation of `m` completed with `commands` in turn (empty when they run out).
fn drain(m: &mut ReplayMachine, mut commands: Vec<Vec<Command>>) -> Vec<Activation> {
    commands.reverse();
    let mut out = Vec::new();
    while let Some(a) = m.next_activation().unwrap() {
        out.push(a);
        let commands = commands.pop().unwrap_or_default();
        m.complete_activation(ActivationCompletion { commands })
            .unwrap();
    }
    out
}

fn whole(events: Vec<Attributes>) -> History {
    let mut all = prefix();
    all.extend(events);
    numbered(all)
}

#[test]
fn a_continued_machine_delivers_what_a_full_replay_delivers() {
    // A signal arrived while the decision ran; the task's marker follows it.
    let new_events = vec![
        signal("s2"),
        marker(5),
        timer_started(5),
        Attributes::TimerFired(TimerFired { seq: 2 }),
    ];
    let mut m = decided();
    m.continue_with(tail(new_events.clone()), ts(200), &[start_timer(5)])
        .unwrap();
    let continued = drain(&mut m, vec![]);

    let mut full = ReplayMachine::new(whole(new_events), ts(200)).unwrap();
    let replayed = drain(
        &mut full,
        vec![vec![schedule(1)], vec![start_timer(5)], vec![]],
    );
    assert_eq!(continued.len(), 1);
    assert_eq!(replayed.last(), continued.last());
    // Delivered again to the end: nothing indexed is kept.
    assert_eq!(m.retained(), 0);
    assert!(!continued[0].is_replaying);
    assert_eq!(continued[0].history_length, 9);
}

#[test]
fn tasks_recorded_after_the_decision_are_replayed() {
    // Another task was decided elsewhere after ours (an inline decision): replayed.
    let new_events = vec![
        marker(5),
        timer_started(5),
        Attributes::TimerFired(TimerFired { seq: 2 }),
        marker(8),
        scheduled(3),
        completed(3),
    ];
    let mut m = decided();
    m.continue_with(tail(new_events.clone()), ts(300), &[start_timer(5)])
        .unwrap();
    let continued = drain(&mut m, vec![vec![schedule(3)]]);
    let mut full = ReplayMachine::new(whole(new_events), ts(300)).unwrap();
    let replayed = drain(
        &mut full,
        vec![vec![schedule(1)], vec![start_timer(5)], vec![schedule(3)]],
    );
    assert_eq!(continued.len(), 2);
    assert!(continued[0].is_replaying);
    assert_eq!(&replayed[replayed.len() - 2..], &continued[..]);
}

fn diverged(m: &mut ReplayMachine, events: History, sent: &[Command]) -> String {
    match m.continue_with(events, ts(200), sent) {
        Err(Continuation::Diverged(why)) => why,
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[test]
fn a_tail_that_does_not_record_the_decision_is_refused() {
    let ok = || vec![marker(5), timer_started(5)];
    // Not right after the known events.
    let mut gap = tail(ok());
    for e in &mut gap.events {
        e.event_id += 1;
    }
    assert!(diverged(&mut decided(), gap, &[start_timer(5)]).contains("event 7"));
    // Another claim decided it (another workflow time).
    let mut other_time = tail(ok());
    other_time.events[0].attributes =
        Some(Attributes::WorkflowTaskCompleted(WorkflowTaskCompleted {
            last_seen_event_id: 5,
            workflow_time: Some(ts(150)),
            ..Default::default()
        }));
    assert!(diverged(&mut decided(), other_time, &[start_timer(5)]).contains("another time"));
    // It saw other events, or recorded other commands.
    let saw_less = tail(vec![marker(4), timer_started(5)]);
    assert!(diverged(&mut decided(), saw_less, &[start_timer(5)]).contains("saw 4 events"));
    let other_commands = tail(vec![marker(5), timer_started(10)]);
    assert!(diverged(&mut decided(), other_commands, &[start_timer(5)]).contains("other commands"));
    // No task recorded; the worker sent other commands than were recorded.
    let no_task = tail(vec![signal("s2")]);
    assert!(diverged(&mut decided(), no_task, &[start_timer(5)]).contains("no workflow task"));
    assert!(diverged(&mut decided(), tail(ok()), &[start_timer(6)]).contains("other commands"));
}

#[test]
fn only_a_machine_that_delivered_everything_continues() {
    let mut m = ReplayMachine::new(numbered(prefix()), ts(100)).unwrap();
    assert!(diverged(&mut m, tail(vec![marker(5)]), &[]).contains("still has activations"));
}

#[test]
fn a_malformed_tail_is_reported_as_malformed() {
    let bad = tail(vec![marker(5), timer_started(5), started()]);
    assert!(matches!(
        decided().continue_with(bad, ts(200), &[start_timer(5)]),
        Err(Continuation::Malformed(_))
    ));
}

#[test]
fn the_echo_driver_completes_each_task_with_its_recorded_commands() {
    let history = whole(vec![
        marker(5),
        timer_started(5),
        Attributes::TimerFired(TimerFired { seq: 2 }),
    ]);
    let completions = recorded_completions(&history);
    assert_eq!(completions.len(), 2);
    assert_eq!(completions[1].commands, vec![start_timer(5)]);
    assert_eq!(replay_with(history.clone(), ts(9), completions).unwrap(), 3);
    let times = replay_echo(&history.encode_to_vec(), 3).unwrap();
    assert_eq!(times.events, 24);
    // Event timestamps unused by the echo; a history built here has them all.
    let _: Option<Timestamp> = history
        .events
        .last()
        .and_then(|e: &HistoryEvent| e.event_time);
}
