//! Python adapter of the replay machine: protobuf bytes in and out, core errors mapped
//! once into structured exceptions.

use prost::Message;
use prost_types::Timestamp;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::errors;
use crate::proto::{ActivationCompletion, DoUpdateJob, History};
use crate::replay::{self, Continuation, MalformedHistory, ReplayError};

fn malformed(py: Python<'_>, message: String) -> PyErr {
    errors::new_err(py, "MalformedHistoryError", (message,))
}

fn malformed_error(py: Python<'_>, err: MalformedHistory) -> PyErr {
    malformed(py, err.message)
}

fn replay_error(py: Python<'_>, err: ReplayError) -> PyErr {
    match err {
        ReplayError::Nondeterminism(e) => {
            errors::new_err(py, "NondeterminismError", (e.seq, e.expected, e.actual))
        }
        ReplayError::InvalidCommand(m) => PyValueError::new_err(format!("invalid command: {m}")),
        ReplayError::Usage(e) => PyRuntimeError::new_err(e.to_string()),
    }
}

fn timestamp_from_ms(ms: i64) -> Timestamp {
    // rem_euclid keeps nanos in 0..1e9 for times before the epoch.
    Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: (ms.rem_euclid(1000) * 1_000_000) as i32,
    }
}

/// Replays one run's history (``History`` protobuf bytes).
#[pyclass(module = "durable_rpc._core", name = "ReplayMachine")]
pub struct ReplayMachine {
    inner: replay::ReplayMachine,
}

#[pymethods]
impl ReplayMachine {
    #[new]
    #[pyo3(signature = (history, task_time_ms))]
    fn new(py: Python<'_>, history: &[u8], task_time_ms: i64) -> PyResult<Self> {
        let history = History::decode(history)
            .map_err(|e| malformed(py, format!("invalid History protobuf: {e}")))?;
        let inner = replay::ReplayMachine::new(history, timestamp_from_ms(task_time_ms))
            .map_err(|e| malformed_error(py, e))?;
        Ok(ReplayMachine { inner })
    }

    /// Adds an update request not in history yet (``DoUpdateJob`` protobuf bytes): it is
    /// delivered after the input jobs of the final, non-replayed activation.
    fn add_pending_update(&mut self, job: &[u8]) -> PyResult<()> {
        let job = DoUpdateJob::decode(job)
            .map_err(|e| PyValueError::new_err(format!("invalid DoUpdateJob protobuf: {e}")))?;
        self.inner.add_pending_update(job);
        Ok(())
    }

    /// The next ``Activation`` (protobuf bytes), or None when replay is over.
    fn next_activation<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let activation = self
            .inner
            .next_activation()
            .map_err(|e| replay_error(py, ReplayError::Usage(e)))?;
        Ok(activation.map(|a| PyBytes::new(py, &a.encode_to_vec())))
    }

    /// Hands back the ``ActivationCompletion`` (protobuf bytes) of the outstanding
    /// activation.
    fn complete_activation(&mut self, py: Python<'_>, completion: &[u8]) -> PyResult<()> {
        let completion = ActivationCompletion::decode(completion).map_err(|e| {
            PyValueError::new_err(format!("invalid ActivationCompletion protobuf: {e}"))
        })?;
        self.inner
            .complete_activation(completion)
            .map_err(|e| replay_error(py, e))
    }

    /// The new commands, as ``ActivationCompletion`` protobuf bytes. Drains them.
    fn take_new_commands<'py>(&mut self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let completion = ActivationCompletion {
            commands: self.inner.take_new_commands(),
        };
        PyBytes::new(py, &completion.encode_to_vec())
    }

    /// Continues a machine that delivered everything with ``tail`` (``History`` bytes:
    /// the events after the known ones) for a new task at ``task_time_ms``; ``sent`` is
    /// the ``ActivationCompletion`` (bytes) the last task was completed with. Returns
    /// None when it continues, or why the history does not continue this machine's
    /// decision (then replay from event 1 on a fresh machine).
    #[pyo3(signature = (tail, task_time_ms, sent))]
    fn continue_with(
        &mut self,
        py: Python<'_>,
        tail: &[u8],
        task_time_ms: i64,
        sent: &[u8],
    ) -> PyResult<Option<String>> {
        let tail = History::decode(tail)
            .map_err(|e| malformed(py, format!("invalid History protobuf: {e}")))?;
        let sent = ActivationCompletion::decode(sent).map_err(|e| {
            PyValueError::new_err(format!("invalid ActivationCompletion protobuf: {e}"))
        })?;
        match self
            .inner
            .continue_with(tail, timestamp_from_ms(task_time_ms), &sent.commands)
        {
            Ok(()) => Ok(None),
            Err(Continuation::Diverged(why)) => Ok(Some(why)),
            Err(Continuation::Malformed(e)) => Err(malformed_error(py, e)),
        }
    }

    /// Whether the outstanding (or last) activation replays recorded history.
    #[getter]
    fn is_replaying(&self) -> bool {
        self.inner.is_replaying()
    }

    /// The run id from ``workflow_started``.
    #[getter]
    fn run_id(&self) -> &str {
        self.inner.run_id()
    }
}

/// Replays ``history`` (``History`` bytes) ``iterations`` times in Rust alone, each
/// recorded task completed with its own recorded commands (no workflow code, no
/// Python in the loop). Returns (events replayed, decode seconds, replay seconds).
#[pyfunction]
#[pyo3(signature = (history, iterations))]
fn replay_core_bench(py: Python<'_>, history: &[u8], iterations: u32) -> PyResult<(u64, f64, f64)> {
    let times = py
        .allow_threads(|| replay::bench::replay_echo(history, iterations))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((
        times.events,
        times.decode.as_secs_f64(),
        times.replay.as_secs_f64(),
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ReplayMachine>()?;
    m.add_function(wrap_pyfunction!(replay_core_bench, m)?)?;
    Ok(())
}
