//! Replay errors: structured, so the Python edge can keep their fields.

use std::fmt;

/// The workflow code no longer produces what the history recorded.
///
/// `expected` describes the recorded command event (or `nothing` when the code produced
/// an extra command); `actual` describes the command the code produced (or `nothing`
/// when the code no longer reaches a recorded command event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NondeterminismError {
    /// The workflow `seq` where the divergence happened (the recorded event's seq when
    /// it has one, otherwise the produced command's seq, otherwise 0).
    pub seq: i64,
    pub expected: String,
    pub actual: String,
}

impl fmt::Display for NondeterminismError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "nondeterminism at seq {}: expected {}, got {}",
            self.seq, self.expected, self.actual
        )
    }
}

impl std::error::Error for NondeterminismError {}

/// The history violates the contract the replay machine relies on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedHistory {
    pub message: String,
}

impl MalformedHistory {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        MalformedHistory {
            message: message.into(),
        }
    }
}

impl fmt::Display for MalformedHistory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed history: {}", self.message)
    }
}

impl std::error::Error for MalformedHistory {}

/// The caller used the machine out of order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageError {
    /// `next_activation` was called while an activation is still waiting for its
    /// completion.
    ActivationPending,
    /// `complete_activation` was called with no activation outstanding.
    NoActivation,
    /// The machine already reported nondeterminism; it cannot continue.
    Failed,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UsageError::ActivationPending => {
                "next_activation called before the previous activation was completed"
            }
            UsageError::NoActivation => "complete_activation called with no activation outstanding",
            UsageError::Failed => "the replay machine already failed with a nondeterminism error",
        })
    }
}

impl std::error::Error for UsageError {}

/// Everything `next_activation` and `complete_activation` can report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    Nondeterminism(NondeterminismError),
    /// A command in the completion is unusable (e.g. it has no kind). The activation
    /// stays outstanding.
    InvalidCommand(String),
    Usage(UsageError),
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Nondeterminism(e) => e.fmt(f),
            ReplayError::InvalidCommand(m) => write!(f, "invalid command: {m}"),
            ReplayError::Usage(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<NondeterminismError> for ReplayError {
    fn from(e: NondeterminismError) -> Self {
        ReplayError::Nondeterminism(e)
    }
}

impl From<UsageError> for ReplayError {
    fn from(e: UsageError) -> Self {
        ReplayError::Usage(e)
    }
}

/// Why [`super::ReplayMachine::continue_with`] could not continue a machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Continuation {
    /// The new events do not continue what the machine decided (another worker decided,
    /// the decision was not recorded, events are missing): replay from event 1.
    Diverged(String),
    /// The new events break the history contract (a full replay fails the same way).
    Malformed(MalformedHistory),
}

impl fmt::Display for Continuation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Continuation::Diverged(why) => write!(f, "history diverged from the cache: {why}"),
            Continuation::Malformed(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Continuation {}
