//! Thin PyO3 adapters. Each submodule converts at the edge and calls the pure core.

mod codec;
mod errors;
mod lease;
mod replay;

use pyo3::prelude::*;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    codec::register(m)?;
    replay::register(m)?;
    lease::register(m)?;
    Ok(())
}
