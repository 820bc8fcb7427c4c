//! durable-rpc's Rust core.
//!
//! `codec`, `replay` and `lease` are pure Rust: no PyO3, no I/O, no clock. The `py`
//! module (feature `python`) holds the thin PyO3 adapters that make up
//! `durable_rpc._core`; this file only registers them.

pub mod codec;
pub mod lease;
pub mod proto;
pub mod replay;

#[cfg(feature = "python")]
mod py;

#[cfg(feature = "python")]
use pyo3::prelude::*;

#[cfg(feature = "python")]
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    py::register(m)
}
