//! Codec errors with stable reason codes shared with the Durable Workflow SDKs.

use std::fmt;

/// Why a value could not be encoded or a frame could not be decoded.
///
/// `reason()` is the stable, machine-readable code; the message is for humans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The frame is not a well-formed Value datum (magic, truncation, trailing bytes,
    /// union branch, UTF-8, non-finite double, negative length, duplicate map key).
    Framing(String),
    /// The frame's schema fingerprint is not the Value schema's.
    UnknownSchema(String),
    /// Encode: a float is NaN or infinite.
    NonFiniteFloat,
    /// Encode: an integer does not fit in int64.
    IntegerOverflow,
    /// Encode: a map key is not a string.
    InvalidMapKey(String),
    /// Encode: the value's type has no Value representation.
    UnsupportedType(String),
    /// Encode or decode: nesting deeper than [`super::MAX_DEPTH`].
    TooDeep,
}

impl CodecError {
    /// The stable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            CodecError::Framing(_) => "invalid_payload_framing",
            CodecError::UnknownSchema(_) => "unsupported_payload_schema",
            CodecError::NonFiniteFloat => "non_finite_float",
            CodecError::IntegerOverflow => "integer_overflow",
            CodecError::InvalidMapKey(_) => "invalid_map_key",
            CodecError::UnsupportedType(_) => "unsupported_value_type",
            CodecError::TooDeep => "nesting_too_deep",
        }
    }

    pub(crate) fn framing(msg: impl Into<String>) -> Self {
        CodecError::Framing(msg.into())
    }
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Framing(m) => write!(f, "malformed payload frame: {m}"),
            CodecError::UnknownSchema(fp) => {
                write!(
                    f,
                    "payload was written with an unknown schema (fingerprint {fp})"
                )
            }
            CodecError::NonFiniteFloat => write!(f, "NaN and infinite floats cannot be encoded"),
            CodecError::IntegerOverflow => {
                write!(f, "integer does not fit in a signed 64-bit long")
            }
            CodecError::InvalidMapKey(t) => write!(f, "map keys must be str, got {t}"),
            CodecError::UnsupportedType(t) => write!(f, "cannot encode a value of type {t}"),
            CodecError::TooDeep => {
                write!(f, "value is nested deeper than {} levels", super::MAX_DEPTH)
            }
        }
    }
}

impl std::error::Error for CodecError {}
