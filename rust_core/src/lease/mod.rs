//! Lease bookkeeping, pure Rust (no PyO3, no I/O, no clock: every time is passed in).
//!
//! - [`LeaseBook`] is the worker's view of the leases it holds: when to heartbeat and
//!   when to give a lease up as lost.
//! - [`DueIndex`] is the server's index of due times (timers, retry backoffs, lease
//!   expiries) in database-clock milliseconds.

mod book;
mod due;

pub use book::{LeaseBook, LeaseBookError, DEFAULT_HEARTBEAT_FRACTION};
pub use due::DueIndex;
