//! Python adapter of the Avro Value codec: walks Python objects straight into the
//! wire [`Writer`] and builds Python objects straight from the wire [`Reader`], so no
//! intermediate Rust `Value` tree is allocated on the hot path.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use super::errors;
use crate::codec::{self, decode_frame, Builder, CodecError, Writer, MAX_DEPTH};

/// Converts a core codec error into a `PayloadError` once, at the edge.
pub(crate) fn payload_error(py: Python<'_>, err: &CodecError) -> PyErr {
    errors::new_err(
        py,
        "PayloadError",
        (err.reason().to_owned(), err.to_string()),
    )
}

enum EncodeFailure {
    Codec(CodecError),
    Python(PyErr),
}

impl From<CodecError> for EncodeFailure {
    fn from(e: CodecError) -> Self {
        EncodeFailure::Codec(e)
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "<unknown>".to_owned())
}

fn write_py(w: &mut Writer, obj: &Bound<'_, PyAny>, depth: usize) -> Result<(), EncodeFailure> {
    if obj.is_none() {
        w.null();
    } else if let Ok(b) = obj.downcast::<PyBool>() {
        w.boolean(b.is_true());
    } else if let Ok(i) = obj.downcast::<PyInt>() {
        match i.extract::<i64>() {
            Ok(v) => w.long(v),
            Err(_) => return Err(CodecError::IntegerOverflow.into()),
        }
    } else if let Ok(s) = obj.downcast::<PyString>() {
        w.string(s.to_str().map_err(EncodeFailure::Python)?);
    } else if let Ok(f) = obj.downcast::<PyFloat>() {
        w.double(f.value())?;
    } else if let Ok(d) = obj.downcast::<PyDict>() {
        if depth >= MAX_DEPTH {
            return Err(CodecError::TooDeep.into());
        }
        w.begin_map(d.len());
        for (key, value) in d.iter() {
            let key = key
                .downcast::<PyString>()
                .map_err(|_| CodecError::InvalidMapKey(type_name(&key)))?;
            w.map_key(key.to_str().map_err(EncodeFailure::Python)?);
            write_py(w, &value, depth + 1)?;
        }
        w.end_block();
    } else if let Ok(l) = obj.downcast::<PyList>() {
        if depth >= MAX_DEPTH {
            return Err(CodecError::TooDeep.into());
        }
        w.begin_array(l.len());
        for item in l.iter() {
            write_py(w, &item, depth + 1)?;
        }
        w.end_block();
    } else if let Ok(b) = obj.downcast::<PyBytes>() {
        w.bytes(b.as_bytes());
    } else if let Ok(b) = obj.downcast::<PyByteArray>() {
        w.bytes(&b.to_vec());
    } else {
        return Err(CodecError::UnsupportedType(type_name(obj)).into());
    }
    Ok(())
}

/// Encodes a plain Python value as one Value frame.
///
/// Accepts None, bool, int (int64), finite float, bytes/bytearray, str, list and dict
/// with str keys (insertion order kept).
#[pyfunction]
pub fn encode<'py>(py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let mut writer = Writer::with_capacity(256);
    match write_py(&mut writer, value, 0) {
        Ok(()) => Ok(PyBytes::new(py, writer.as_bytes())),
        Err(EncodeFailure::Codec(e)) => Err(payload_error(py, &e)),
        Err(EncodeFailure::Python(e)) => Err(e),
    }
}

struct PyBuilder<'py> {
    py: Python<'py>,
}

enum DecodeFailure {
    Codec(CodecError),
    Python(PyErr),
}

impl From<CodecError> for DecodeFailure {
    fn from(e: CodecError) -> Self {
        DecodeFailure::Codec(e)
    }
}

impl From<PyErr> for DecodeFailure {
    fn from(e: PyErr) -> Self {
        DecodeFailure::Python(e)
    }
}

type Node<'py> = Bound<'py, PyAny>;

impl<'py> Builder for PyBuilder<'py> {
    type Node = Node<'py>;
    type Error = DecodeFailure;

    fn null(&mut self) -> Result<Node<'py>, DecodeFailure> {
        Ok(self.py.None().into_bound(self.py))
    }
    fn boolean(&mut self, v: bool) -> Result<Node<'py>, DecodeFailure> {
        Ok(PyBool::new(self.py, v).to_owned().into_any())
    }
    fn long(&mut self, v: i64) -> Result<Node<'py>, DecodeFailure> {
        let Ok(n) = v.into_pyobject(self.py);
        Ok(n.into_any())
    }
    fn double(&mut self, v: f64) -> Result<Node<'py>, DecodeFailure> {
        Ok(PyFloat::new(self.py, v).into_any())
    }
    fn bytes(&mut self, v: &[u8]) -> Result<Node<'py>, DecodeFailure> {
        Ok(PyBytes::new(self.py, v).into_any())
    }
    fn string(&mut self, v: &str) -> Result<Node<'py>, DecodeFailure> {
        Ok(PyString::new(self.py, v).into_any())
    }
    fn array(&mut self, items: Vec<Node<'py>>) -> Result<Node<'py>, DecodeFailure> {
        Ok(PyList::new(self.py, items)?.into_any())
    }
    fn map(&mut self, entries: Vec<(&str, Node<'py>)>) -> Result<Node<'py>, DecodeFailure> {
        let dict = PyDict::new(self.py);
        let count = entries.len();
        for (key, value) in entries {
            dict.set_item(PyString::new(self.py, key), value)?;
        }
        if dict.len() != count {
            return Err(CodecError::Framing("duplicate map key".to_owned()).into());
        }
        Ok(dict.into_any())
    }
}

/// Decodes one Value frame into plain Python values.
#[pyfunction]
pub fn decode<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    match decode_frame(data, &mut PyBuilder { py }) {
        Ok(node) => Ok(node),
        Err(DecodeFailure::Codec(e)) => Err(payload_error(py, &e)),
        Err(DecodeFailure::Python(e)) => Err(e),
    }
}

/// Checks that `data` is a well-formed Value frame without building Python objects.
#[pyfunction]
pub fn validate(py: Python<'_>, data: &[u8]) -> PyResult<()> {
    codec::validate(data).map_err(|e| payload_error(py, &e))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(encode, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add("VALUE_SCHEMA_JSON", codec::VALUE_SCHEMA_JSON)?;
    m.add(
        "VALUE_SCHEMA_FINGERPRINT",
        PyBytes::new(py, &codec::value_schema_fingerprint()),
    )?;
    m.add("MAX_DEPTH", MAX_DEPTH)?;
    Ok(())
}
