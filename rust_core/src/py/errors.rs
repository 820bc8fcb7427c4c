//! The structured exceptions (`PayloadError`, `NondeterminismError`,
//! `MalformedHistoryError`). Under the stable ABI (abi3) a `#[pyclass]` cannot extend a
//! built-in exception, so they are Python classes (errors.py, compiled into the
//! extension) created once when the module is imported and raised from here.

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;
use pyo3::PyErrArguments;

static CLASSES: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

fn classes(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    CLASSES
        .get_or_try_init(py, || {
            PyModule::from_code(
                py,
                pyo3::ffi::c_str!(include_str!("errors.py")),
                c"durable_rpc/_core/errors.py",
                c"durable_rpc._core_errors",
            )
            .map(Bound::unbind)
        })
        .map(|m| m.bind(py))
}

/// A new exception of class `name` built with `args` (its constructor's arguments). Should
/// the class itself be unavailable, that failure is what is raised.
pub(crate) fn new_err<A>(py: Python<'_>, name: &str, args: A) -> PyErr
where
    A: PyErrArguments + Send + Sync + 'static,
{
    match classes(py).and_then(|m| m.getattr(name)) {
        Ok(cls) => match cls.downcast_into::<PyType>() {
            Ok(ty) => PyErr::from_type(ty, args),
            Err(e) => e.into(),
        },
        Err(e) => e,
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let errors = classes(m.py())?;
    for name in [
        "PayloadError",
        "NondeterminismError",
        "MalformedHistoryError",
    ] {
        m.add(name, errors.getattr(name)?)?;
    }
    Ok(())
}
