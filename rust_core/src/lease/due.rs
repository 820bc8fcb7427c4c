//! [`DueIndex`]: the server's index of due times.

use std::collections::{BTreeSet, HashMap};

/// Due times keyed by an arbitrary string key (a timer, a retry backoff, a lease
/// expiry). Times are milliseconds of the database clock, supplied by the caller.
///
/// Every operation is O(log n): an ordered set of `(due_ms, key)` plus a map from key to
/// its current due time. Keys due at the same time pop in key order.
#[derive(Debug, Clone, Default)]
pub struct DueIndex {
    by_time: BTreeSet<(i64, String)>,
    by_key: HashMap<String, i64>,
}

impl DueIndex {
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedules `key` at `due_ms`, replacing its previous due time if any.
    pub fn schedule(&mut self, key: &str, due_ms: i64) {
        match self.by_key.get_mut(key) {
            Some(current) => {
                if *current == due_ms {
                    return;
                }
                self.by_time.remove(&(*current, key.to_owned()));
                *current = due_ms;
            }
            None => {
                self.by_key.insert(key.to_owned(), due_ms);
            }
        }
        self.by_time.insert((due_ms, key.to_owned()));
    }

    /// Removes `key`. Returns whether it was scheduled.
    pub fn cancel(&mut self, key: &str) -> bool {
        match self.by_key.remove_entry(key) {
            Some((key, due)) => {
                self.by_time.remove(&(due, key));
                true
            }
            None => false,
        }
    }

    /// Removes and returns the keys due at or before `now_ms`, in due order.
    pub fn pop_due(&mut self, now_ms: i64) -> Vec<String> {
        let mut due = Vec::new();
        while let Some(first) = self.by_time.first() {
            if first.0 > now_ms {
                break;
            }
            if let Some((_, key)) = self.by_time.pop_first() {
                self.by_key.remove(&key);
                due.push(key);
            }
        }
        due
    }

    /// The earliest due time, if any key is scheduled.
    pub fn next_due(&self) -> Option<i64> {
        self.by_time.first().map(|(due, _)| *due)
    }

    /// The due time of `key`, if scheduled.
    pub fn due_time(&self, key: &str) -> Option<i64> {
        self.by_key.get(key).copied()
    }

    /// How many keys are scheduled.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether nothing is scheduled.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_due_order() {
        let mut idx = DueIndex::new();
        assert!(idx.is_empty());
        assert_eq!(idx.next_due(), None);
        idx.schedule("timer:b", 300);
        idx.schedule("timer:a", 100);
        idx.schedule("retry:x", 200);
        assert_eq!(idx.len(), 3);
        assert_eq!(idx.next_due(), Some(100));
        assert!(idx.pop_due(99).is_empty());
        assert_eq!(idx.pop_due(200), vec!["timer:a", "retry:x"]);
        assert_eq!(idx.len(), 1);
        assert_eq!(idx.next_due(), Some(300));
        assert_eq!(idx.pop_due(i64::MAX), vec!["timer:b"]);
        assert!(idx.is_empty());
    }

    #[test]
    fn rescheduling_replaces_the_due_time() {
        let mut idx = DueIndex::new();
        idx.schedule("lease:1", 100);
        idx.schedule("lease:1", 500);
        assert_eq!(idx.len(), 1);
        assert_eq!(idx.due_time("lease:1"), Some(500));
        assert!(idx.pop_due(100).is_empty());
        idx.schedule("lease:1", 50);
        idx.schedule("lease:1", 50);
        assert_eq!(idx.pop_due(60), vec!["lease:1"]);
        assert!(idx.pop_due(1_000).is_empty());
    }

    #[test]
    fn cancel_removes_the_key() {
        let mut idx = DueIndex::new();
        idx.schedule("a", 10);
        idx.schedule("b", 20);
        assert!(idx.cancel("a"));
        assert!(!idx.cancel("a"));
        assert_eq!(idx.next_due(), Some(20));
        assert_eq!(idx.pop_due(100), vec!["b"]);
    }

    #[test]
    fn ties_pop_in_key_order() {
        let mut idx = DueIndex::new();
        for key in ["c", "a", "b"] {
            idx.schedule(key, 7);
        }
        assert_eq!(idx.pop_due(7), vec!["a", "b", "c"]);
    }

    #[test]
    fn many_keys_stay_consistent() {
        let mut idx = DueIndex::new();
        for i in 0..10_000i64 {
            idx.schedule(&format!("k{i}"), (i * 7919) % 10_007);
        }
        for i in (0..10_000i64).step_by(2) {
            idx.cancel(&format!("k{i}"));
        }
        assert_eq!(idx.len(), 5_000);
        let popped = idx.pop_due(i64::MAX);
        assert_eq!(popped.len(), 5_000);
        let dues: Vec<i64> = popped
            .iter()
            .map(|k| (k[1..].parse::<i64>().unwrap() * 7919) % 10_007)
            .collect();
        assert!(dues.windows(2).all(|w| w[0] <= w[1]));
    }
}
