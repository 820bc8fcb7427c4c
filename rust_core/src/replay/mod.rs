//! The replay machine: turns a run's history into activations for the Python workflow
//! runtime and checks the commands it produces against the recorded command events.
//!
//! Pure Rust: no PyO3, no I/O, no clock (the task's time is passed in).
//!
//! # The history contract
//!
//! Events are numbered 1..N without gaps and event 1 is `workflow_started`.
//! *Input events* (`workflow_started`, `activity_completed`, `activity_failed`,
//! `timer_fired`, `signal_received`, `cancel_requested`) become activation jobs.
//! *Command events* (`activity_scheduled`, `timer_started`, `timer_cancelled`,
//! `workflow_completed`, `workflow_failed`, `workflow_cancelled`) follow a
//! `workflow_task_completed` marker contiguously, in the order of the commands the
//! worker sent. `workflow_terminated` is terminal and yields no job.
//!
//! Each marker `M` replays as one activation holding the undelivered input events with
//! `event_id <= M.last_seen_event_id`; input events that arrived while that task ran
//! (between `last_seen` and `M`) go to a later activation. After the last marker, any
//! undelivered input events form one final, non-replayed activation whose commands are
//! all new.

mod describe;
mod error;
mod machine;

#[cfg(test)]
mod tests;

pub use error::{MalformedHistory, NondeterminismError, ReplayError, UsageError};
pub use machine::ReplayMachine;
