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
//! `workflow_completed`, `workflow_failed`, `workflow_cancelled`,
//! `search_attributes_upserted`, `memo_upserted`, `marker_recorded`, `update_accepted`,
//! `update_completed`) follow a
//! `workflow_task_completed` marker contiguously, in the order of the commands the
//! worker sent. `workflow_terminated` and `workflow_timed_out` are terminal and yield no
//! job.
//!
//! Each marker `M` replays as one activation holding the undelivered input events with
//! `event_id <= M.last_seen_event_id`; input events that arrived while that task ran
//! (between `last_seen` and `M`) go to a later activation. After the last marker, any
//! undelivered input events form one final, non-replayed activation whose commands are
//! all new.
//!
//! A replayed activation also carries the `marker_recorded` events of its task
//! (`Activation.markers`): side-effect values the runtime returns instead of calling
//! the function again, and the patch ids the task recorded. Recorded patch markers the
//! code no longer produces are skipped when matching (a deleted `deprecate_patch`).

pub mod bench;
mod describe;
mod error;
mod machine;

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_activity_cancel;
#[cfg(test)]
mod tests_budgets;
#[cfg(test)]
mod tests_cancellation;
#[cfg(test)]
mod tests_children;
#[cfg(test)]
mod tests_continuation;
#[cfg(test)]
mod tests_continue;
#[cfg(test)]
mod tests_markers;
#[cfg(test)]
mod tests_memo;
#[cfg(test)]
mod tests_search;
#[cfg(test)]
mod tests_sessions;
#[cfg(test)]
mod tests_signals;
#[cfg(test)]
mod tests_streams;
#[cfg(test)]
mod tests_updates;

pub use error::{Continuation, MalformedHistory, NondeterminismError, ReplayError, UsageError};
pub use machine::ReplayMachine;
