//! Thin PyO3 adapters. Each submodule converts at the edge and calls the pure core.

mod codec;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    codec::register(m)?;
    Ok(())
}
