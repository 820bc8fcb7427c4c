//! Python adapters of the lease bookkeeping.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::lease;

/// The leases a worker holds; times are local monotonic milliseconds.
#[pyclass(module = "durable_rpc._core", name = "LeaseBook")]
pub struct LeaseBook {
    inner: lease::LeaseBook,
}

#[pymethods]
impl LeaseBook {
    #[new]
    // A literal default so the text signature shows it; equals DEFAULT_HEARTBEAT_FRACTION.
    #[pyo3(signature = (heartbeat_fraction = 0.5))]
    fn new(heartbeat_fraction: f64) -> PyResult<Self> {
        lease::LeaseBook::new(heartbeat_fraction)
            .map(|inner| LeaseBook { inner })
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The configured heartbeat fraction.
    #[getter]
    fn heartbeat_fraction(&self) -> f64 {
        self.inner.heartbeat_fraction()
    }

    fn track(&mut self, task_id: &str, token: i64, lease_ms: i64, now_ms: i64) -> bool {
        self.inner.track(task_id, token, lease_ms, now_ms)
    }

    fn renewed(&mut self, task_id: &str, token: i64, lease_ms: i64, now_ms: i64) -> bool {
        self.inner.renewed(task_id, token, lease_ms, now_ms)
    }

    fn release(&mut self, task_id: &str) -> bool {
        self.inner.release(task_id)
    }

    fn token(&self, task_id: &str) -> Option<i64> {
        self.inner.token(task_id)
    }

    fn due_for_heartbeat(&self, now_ms: i64) -> Vec<(String, i64)> {
        self.inner.due_for_heartbeat(now_ms)
    }

    fn expired(&self, now_ms: i64) -> Vec<(String, i64)> {
        self.inner.expired(now_ms)
    }

    fn next_deadline(&self) -> Option<i64> {
        self.inner.next_deadline()
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// Due times (database-clock milliseconds) keyed by string.
#[pyclass(module = "durable_rpc._core", name = "DueIndex")]
pub struct DueIndex {
    inner: lease::DueIndex,
}

#[pymethods]
impl DueIndex {
    #[new]
    fn new() -> Self {
        DueIndex {
            inner: lease::DueIndex::new(),
        }
    }

    fn schedule(&mut self, key: &str, due_ms: i64) {
        self.inner.schedule(key, due_ms);
    }

    fn cancel(&mut self, key: &str) -> bool {
        self.inner.cancel(key)
    }

    fn pop_due(&mut self, now_ms: i64) -> Vec<String> {
        self.inner.pop_due(now_ms)
    }

    fn next_due(&self) -> Option<i64> {
        self.inner.next_due()
    }

    fn due_time(&self, key: &str) -> Option<i64> {
        self.inner.due_time(key)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __contains__(&self, key: &str) -> bool {
        self.inner.due_time(key).is_some()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LeaseBook>()?;
    m.add_class::<DueIndex>()?;
    Ok(())
}
