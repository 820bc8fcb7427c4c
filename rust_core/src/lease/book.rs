//! [`LeaseBook`]: the worker side of the lease protocol.

use std::collections::HashMap;
use std::fmt;

/// Heartbeat at half the lease unless configured otherwise.
pub const DEFAULT_HEARTBEAT_FRACTION: f64 = 0.5;

/// A rejected [`LeaseBook`] configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseBookError {
    /// The heartbeat fraction is not in (0, 0.5]: heartbeats must come at most half-way
    /// through the lease so one lost heartbeat does not lose the lease.
    HeartbeatFraction(f64),
}

impl fmt::Display for LeaseBookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseBookError::HeartbeatFraction(v) => write!(
                f,
                "heartbeat_fraction must be in (0, 0.5] (heartbeat at most half-way through \
                 the lease), got {v}"
            ),
        }
    }
}

impl std::error::Error for LeaseBookError {}

#[derive(Debug, Clone, Copy)]
struct Held {
    token: i64,
    lease_ms: i64,
    granted_ms: i64,
}

impl Held {
    fn heartbeat_due(&self, fraction: f64) -> i64 {
        // lease_ms * fraction is at most lease_ms / 2, so the cast cannot overflow.
        self.granted_ms
            .saturating_add((self.lease_ms as f64 * fraction) as i64)
    }

    fn expires(&self) -> i64 {
        self.granted_ms.saturating_add(self.lease_ms)
    }
}

/// The leases a worker holds, keyed by task id.
///
/// Times are the worker's local monotonic clock in milliseconds, supplied by the caller.
/// A lease granted (or renewed) at `t` for `lease_ms` is due for a heartbeat from
/// `t + lease_ms * heartbeat_fraction` and has lapsed locally from `t + lease_ms`
/// (the caller should record `t` as the time it *sent* the claim or heartbeat, so the
/// local view errs on the early side of the server's).
#[derive(Debug, Clone)]
pub struct LeaseBook {
    fraction: f64,
    leases: HashMap<String, Held>,
}

impl Default for LeaseBook {
    fn default() -> Self {
        LeaseBook {
            fraction: DEFAULT_HEARTBEAT_FRACTION,
            leases: HashMap::new(),
        }
    }
}

impl LeaseBook {
    /// A book heartbeating at `heartbeat_fraction` of each lease, in (0, 0.5].
    pub fn new(heartbeat_fraction: f64) -> Result<Self, LeaseBookError> {
        // NaN fails both comparisons.
        if !(heartbeat_fraction > 0.0 && heartbeat_fraction <= 0.5) {
            return Err(LeaseBookError::HeartbeatFraction(heartbeat_fraction));
        }
        Ok(LeaseBook {
            fraction: heartbeat_fraction,
            leases: HashMap::new(),
        })
    }

    /// The configured heartbeat fraction.
    pub fn heartbeat_fraction(&self) -> f64 {
        self.fraction
    }

    /// Records a claimed lease. Replaces a lease already held on the task unless the
    /// held one has a higher fencing token (a stale claim never displaces a newer one).
    /// Returns whether the lease was recorded.
    pub fn track(&mut self, task_id: &str, token: i64, lease_ms: i64, now_ms: i64) -> bool {
        let held = Held {
            token,
            lease_ms,
            granted_ms: now_ms,
        };
        match self.leases.get_mut(task_id) {
            Some(existing) if existing.token > token => false,
            Some(existing) => {
                *existing = held;
                true
            }
            None => {
                self.leases.insert(task_id.to_owned(), held);
                true
            }
        }
    }

    /// Records a successful heartbeat: the lease now runs `lease_ms` from `now_ms`.
    /// Ignored (returns false) when the task is not held or `token` is not the held
    /// token: a stale renewal must not revive a newer lease.
    pub fn renewed(&mut self, task_id: &str, token: i64, lease_ms: i64, now_ms: i64) -> bool {
        match self.leases.get_mut(task_id) {
            Some(held) if held.token == token => {
                held.lease_ms = lease_ms;
                held.granted_ms = now_ms;
                true
            }
            _ => false,
        }
    }

    /// Forgets the task's lease. Returns whether it was held.
    pub fn release(&mut self, task_id: &str) -> bool {
        self.leases.remove(task_id).is_some()
    }

    /// The fencing token held for `task_id`, if any.
    pub fn token(&self, task_id: &str) -> Option<i64> {
        self.leases.get(task_id).map(|h| h.token)
    }

    /// Leases whose heartbeat is due at `now_ms` and that have not expired, earliest due
    /// first (ties by task id). Does not reset anything: [`renewed`](Self::renewed) does.
    pub fn due_for_heartbeat(&self, now_ms: i64) -> Vec<(String, i64)> {
        let fraction = self.fraction;
        self.select(
            |h| h.heartbeat_due(fraction) <= now_ms && now_ms < h.expires(),
            |h| h.heartbeat_due(fraction),
        )
    }

    /// Leases past `granted + lease_ms` at `now_ms`, earliest expiry first (ties by task
    /// id): lapsed by the local clock. Only the server knows whether they are lost (a
    /// holder's late heartbeat or report is accepted while its token is the latest).
    pub fn expired(&self, now_ms: i64) -> Vec<(String, i64)> {
        self.select(|h| h.expires() <= now_ms, Held::expires)
    }

    /// The earliest heartbeat-due time over all held leases: when the caller should
    /// next look at the book. `None` when nothing is held.
    pub fn next_deadline(&self) -> Option<i64> {
        self.leases
            .values()
            .map(|h| h.heartbeat_due(self.fraction))
            .min()
    }

    /// How many leases are held.
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether no lease is held.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    fn select(
        &self,
        keep: impl Fn(&Held) -> bool,
        order: impl Fn(&Held) -> i64,
    ) -> Vec<(String, i64)> {
        let mut hits: Vec<(i64, &str, i64)> = self
            .leases
            .iter()
            .filter(|(_, h)| keep(h))
            .map(|(id, h)| (order(h), id.as_str(), h.token))
            .collect();
        hits.sort_unstable();
        hits.into_iter()
            .map(|(_, id, token)| (id.to_owned(), token))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fraction_must_be_in_range() {
        assert!(LeaseBook::new(0.5).is_ok());
        assert!(LeaseBook::new(0.1).is_ok());
        for bad in [0.0, -0.1, 0.51, 1.0, f64::NAN, f64::INFINITY] {
            let err = LeaseBook::new(bad).unwrap_err();
            assert!(err.to_string().contains("(0, 0.5]"));
        }
        assert_eq!(LeaseBook::default().heartbeat_fraction(), 0.5);
    }

    #[test]
    fn heartbeat_due_at_half_the_lease() {
        let mut book = LeaseBook::default();
        assert!(book.is_empty());
        book.track("t1", 1, 10_000, 1_000);
        assert_eq!(book.len(), 1);
        assert_eq!(book.next_deadline(), Some(6_000));
        assert!(book.due_for_heartbeat(5_999).is_empty());
        assert_eq!(book.due_for_heartbeat(6_000), vec![("t1".to_owned(), 1)]);
        // Not reset by asking.
        assert_eq!(book.due_for_heartbeat(7_000).len(), 1);
        assert!(book.expired(10_999).is_empty());
    }

    #[test]
    fn renewal_resets_the_deadlines() {
        let mut book = LeaseBook::new(0.25).unwrap();
        book.track("t1", 3, 8_000, 0);
        assert_eq!(book.next_deadline(), Some(2_000));
        assert!(book.renewed("t1", 3, 8_000, 2_500));
        assert_eq!(book.next_deadline(), Some(4_500));
        assert!(book.due_for_heartbeat(4_000).is_empty());
        assert!(book.expired(10_000).is_empty());
        assert_eq!(book.expired(10_500), vec![("t1".to_owned(), 3)]);
    }

    #[test]
    fn stale_renewal_does_not_revive_a_newer_lease() {
        let mut book = LeaseBook::default();
        book.track("t1", 1, 10_000, 0);
        // Lease lost and re-claimed with a higher token.
        assert!(book.track("t1", 2, 10_000, 20_000));
        assert!(!book.renewed("t1", 1, 10_000, 25_000));
        assert_eq!(book.next_deadline(), Some(25_000));
        // A stale claim does not displace the newer one either.
        assert!(!book.track("t1", 1, 10_000, 26_000));
        assert_eq!(book.token("t1"), Some(2));
        assert!(!book.renewed("missing", 1, 10_000, 0));
    }

    #[test]
    fn expired_leases_are_reported_and_not_heartbeated() {
        let mut book = LeaseBook::default();
        book.track("a", 1, 1_000, 0);
        book.track("b", 5, 4_000, 0);
        book.track("c", 2, 1_000, 100);
        assert_eq!(book.next_deadline(), Some(500));
        assert_eq!(book.expired(1_000), vec![("a".to_owned(), 1)]);
        assert_eq!(
            book.expired(1_100),
            vec![("a".to_owned(), 1), ("c".to_owned(), 2)]
        );
        assert_eq!(book.due_for_heartbeat(2_000), vec![("b".to_owned(), 5)]);
        assert!(book.release("a"));
        assert!(!book.release("a"));
        assert_eq!(book.len(), 2);
    }

    #[test]
    fn due_order_is_earliest_first() {
        let mut book = LeaseBook::default();
        book.track("late", 1, 10_000, 0);
        book.track("early2", 4, 2_000, 0);
        book.track("early1", 3, 2_000, 0);
        book.track("earliest", 2, 1_600, 0);
        assert_eq!(
            book.due_for_heartbeat(1_000),
            vec![
                ("earliest".to_owned(), 2),
                ("early1".to_owned(), 3),
                ("early2".to_owned(), 4)
            ]
        );
        assert_eq!(book.due_for_heartbeat(5_000), vec![("late".to_owned(), 1)]);
    }
}
