//! The Avro Value codec: single-object frames of the fixed recursive Value schema.
//!
//! Pure Rust, no I/O. [`wire`] holds the format; [`Value`] is the Rust-side value and
//! the reference walker over it; the Python adapter walks Python objects instead.

pub mod error;
pub mod schema;
pub mod wire;

pub use error::CodecError;
pub use schema::{value_schema_fingerprint, VALUE_SCHEMA_JSON};
pub use wire::{decode_frame, Builder, Writer};

/// Deepest nesting of arrays and maps accepted on encode and decode. Guards the
/// recursive walkers (and Python's stack) against hostile or cyclic input.
pub const MAX_DEPTH: usize = 128;

/// A Value, as the schema defines it. Map entries keep their wire order.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Boolean(bool),
    Long(i64),
    Double(f64),
    Bytes(Vec<u8>),
    String(String),
    Array(Vec<Value>),
    Map(Vec<(String, Value)>),
}

/// Encodes `value` as one frame.
pub fn encode(value: &Value) -> Result<Vec<u8>, CodecError> {
    let mut writer = Writer::default();
    write_value(&mut writer, value, 0)?;
    Ok(writer.finish())
}

fn write_value(w: &mut Writer, value: &Value, depth: usize) -> Result<(), CodecError> {
    match value {
        Value::Null => w.null(),
        Value::Boolean(b) => w.boolean(*b),
        Value::Long(v) => w.long(*v),
        Value::Double(v) => w.double(*v)?,
        Value::Bytes(v) => w.bytes(v),
        Value::String(v) => w.string(v),
        Value::Array(items) => {
            if depth >= MAX_DEPTH {
                return Err(CodecError::TooDeep);
            }
            w.begin_array(items.len());
            for item in items {
                write_value(w, item, depth + 1)?;
            }
            w.end_block();
        }
        Value::Map(entries) => {
            if depth >= MAX_DEPTH {
                return Err(CodecError::TooDeep);
            }
            let mut seen = std::collections::HashSet::with_capacity(entries.len());
            w.begin_map(entries.len());
            for (key, item) in entries {
                if !seen.insert(key.as_str()) {
                    return Err(CodecError::InvalidMapKey(format!("duplicate key {key:?}")));
                }
                w.map_key(key);
                write_value(w, item, depth + 1)?;
            }
            w.end_block();
        }
    }
    Ok(())
}

struct ValueBuilder;

impl Builder for ValueBuilder {
    type Node = Value;
    type Error = CodecError;
    fn null(&mut self) -> Result<Value, CodecError> {
        Ok(Value::Null)
    }
    fn boolean(&mut self, v: bool) -> Result<Value, CodecError> {
        Ok(Value::Boolean(v))
    }
    fn long(&mut self, v: i64) -> Result<Value, CodecError> {
        Ok(Value::Long(v))
    }
    fn double(&mut self, v: f64) -> Result<Value, CodecError> {
        Ok(Value::Double(v))
    }
    fn bytes(&mut self, v: &[u8]) -> Result<Value, CodecError> {
        Ok(Value::Bytes(v.to_vec()))
    }
    fn string(&mut self, v: &str) -> Result<Value, CodecError> {
        Ok(Value::String(v.to_owned()))
    }
    fn array(&mut self, items: Vec<Value>) -> Result<Value, CodecError> {
        Ok(Value::Array(items))
    }
    fn map(&mut self, entries: Vec<(&str, Value)>) -> Result<Value, CodecError> {
        let mut seen = std::collections::HashSet::with_capacity(entries.len());
        for (key, _) in &entries {
            if !seen.insert(*key) {
                return Err(CodecError::framing(format!("duplicate map key {key:?}")));
            }
        }
        Ok(Value::Map(
            entries
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        ))
    }
}

/// Checks a frame without building any value: what the server does with payloads it
/// only stores and forwards.
struct Validator;

impl Builder for Validator {
    type Node = ();
    type Error = CodecError;
    fn null(&mut self) -> Result<(), CodecError> {
        Ok(())
    }
    fn boolean(&mut self, _: bool) -> Result<(), CodecError> {
        Ok(())
    }
    fn long(&mut self, _: i64) -> Result<(), CodecError> {
        Ok(())
    }
    fn double(&mut self, _: f64) -> Result<(), CodecError> {
        Ok(())
    }
    fn bytes(&mut self, _: &[u8]) -> Result<(), CodecError> {
        Ok(())
    }
    fn string(&mut self, _: &str) -> Result<(), CodecError> {
        Ok(())
    }
    fn array(&mut self, _: Vec<()>) -> Result<(), CodecError> {
        Ok(())
    }
    fn map(&mut self, entries: Vec<(&str, ())>) -> Result<(), CodecError> {
        let mut seen = std::collections::HashSet::with_capacity(entries.len());
        for (key, _) in &entries {
            if !seen.insert(*key) {
                return Err(CodecError::framing(format!("duplicate map key {key:?}")));
            }
        }
        Ok(())
    }
}

/// Checks that `frame` is a well-formed Value frame, building nothing.
pub fn validate(frame: &[u8]) -> Result<(), CodecError> {
    decode_frame(frame, &mut Validator)
}

/// Decodes one frame into a [`Value`].
pub fn decode(frame: &[u8]) -> Result<Value, CodecError> {
    decode_frame(frame, &mut ValueBuilder)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: [u8; 10] = [0xc3, 0x01, 0xe2, 0xa3, 0x3d, 0xff, 0x55, 0x80, 0x22, 0x37];

    fn frame(datum: &[u8]) -> Vec<u8> {
        let mut f = HEADER.to_vec();
        f.extend_from_slice(datum);
        f
    }

    fn roundtrip(value: Value, datum: &[u8]) {
        let bytes = encode(&value).unwrap();
        assert_eq!(bytes, frame(datum), "encoding of {value:?}");
        assert_eq!(decode(&bytes).unwrap(), value);
    }

    #[test]
    fn scalars_match_the_golden_frames() {
        roundtrip(Value::Null, &[0x00]);
        roundtrip(Value::Boolean(true), &[0x02, 0x01]);
        roundtrip(Value::Long(7), &[0x04, 0x0e]);
        roundtrip(
            Value::Long(i64::MIN),
            &[
                0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        );
        roundtrip(
            Value::Long(i64::MAX),
            &[
                0x04, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        );
        roundtrip(Value::Double(7.0), &[0x06, 0, 0, 0, 0, 0, 0, 0x1c, 0x40]);
        roundtrip(Value::Bytes(vec![0x00, 0xff]), &[0x08, 0x04, 0x00, 0xff]);
        roundtrip(
            Value::String("héllo".into()),
            &[0x0a, 0x0c, b'h', 0xc3, 0xa9, b'l', b'l', b'o'],
        );
    }

    #[test]
    fn negative_zero_keeps_its_sign() {
        let bytes = encode(&Value::Double(-0.0)).unwrap();
        assert_eq!(bytes, frame(&[0x06, 0, 0, 0, 0, 0, 0, 0, 0x80]));
        match decode(&bytes).unwrap() {
            Value::Double(v) => assert!(v == 0.0 && v.is_sign_negative()),
            other => panic!("decoded {other:?}"),
        }
    }

    #[test]
    fn containers_match_the_golden_frames() {
        roundtrip(Value::Map(vec![]), &[0x0e, 0x00]);
        roundtrip(Value::Array(vec![]), &[0x0c, 0x00]);
        roundtrip(
            Value::Map(vec![("0".into(), Value::String("zero".into()))]),
            &[
                0x0e, 0x02, 0x02, b'0', 0x0a, 0x08, b'z', b'e', b'r', b'o', 0x00,
            ],
        );
        roundtrip(
            Value::Array(vec![Value::Null, Value::Boolean(true), Value::Long(7)]),
            &[0x0c, 0x06, 0x00, 0x02, 0x01, 0x04, 0x0e, 0x00],
        );
    }

    #[test]
    fn map_order_is_kept() {
        let v = Value::Map(vec![
            ("b".into(), Value::Long(1)),
            ("a".into(), Value::Long(2)),
        ]);
        assert_eq!(decode(&encode(&v).unwrap()).unwrap(), v);
    }

    #[test]
    fn encode_rejects_what_has_no_value() {
        assert_eq!(
            encode(&Value::Double(f64::NAN)).unwrap_err().reason(),
            "non_finite_float"
        );
        assert_eq!(
            encode(&Value::Double(f64::INFINITY)).unwrap_err().reason(),
            "non_finite_float"
        );
        let dup = Value::Map(vec![("k".into(), Value::Null), ("k".into(), Value::Null)]);
        assert_eq!(encode(&dup).unwrap_err().reason(), "invalid_map_key");
        let mut deep = Value::Null;
        for _ in 0..=MAX_DEPTH {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(encode(&deep).unwrap_err().reason(), "nesting_too_deep");
    }

    fn reason(bytes: &[u8]) -> &'static str {
        decode(bytes).unwrap_err().reason()
    }

    #[test]
    fn decode_rejects_malformed_frames() {
        assert_eq!(reason(b""), "invalid_payload_framing");
        assert_eq!(reason(b"%%%"), "invalid_payload_framing");
        assert_eq!(reason(&[0xc3, 0x01]), "invalid_payload_framing");
        assert_eq!(reason(&HEADER), "invalid_payload_framing");
        assert_eq!(reason(&frame(&[0x02])), "invalid_payload_framing");
        assert_eq!(reason(&frame(&[0x02, 0x02])), "invalid_payload_framing");
        assert_eq!(reason(&frame(&[0x06, 0, 0])), "invalid_payload_framing");
        assert_eq!(reason(&frame(&[0x00, 0x00])), "invalid_payload_framing");
        assert_eq!(reason(&frame(&[0x10])), "invalid_payload_framing");
        assert_eq!(
            reason(&frame(&[0x0a, 0x02, 0xff])),
            "invalid_payload_framing"
        );
        assert_eq!(reason(&frame(&[0x08, 0x01])), "invalid_payload_framing");
        assert_eq!(
            reason(&frame(&[0x06, 0, 0, 0, 0, 0, 0, 0xf8, 0x7f])),
            "invalid_payload_framing"
        );
        let mut other = frame(&[0x00]);
        other[2] = 0x1d;
        assert_eq!(reason(&other), "unsupported_payload_schema");
    }

    #[test]
    fn validate_agrees_with_decode() {
        let good = encode(&Value::Map(vec![("k".into(), Value::Long(1))])).unwrap();
        assert!(validate(&good).is_ok());
        let dup = frame(&[0x0e, 0x04, 0x02, b'k', 0x00, 0x02, b'k', 0x00, 0x00]);
        assert_eq!(
            validate(&dup).unwrap_err().reason(),
            "invalid_payload_framing"
        );
        assert_eq!(
            validate(b"").unwrap_err().reason(),
            "invalid_payload_framing"
        );
    }

    #[test]
    fn duplicate_map_keys_are_rejected_on_decode() {
        let bytes = frame(&[0x0e, 0x04, 0x02, b'k', 0x00, 0x02, b'k', 0x00, 0x00]);
        assert_eq!(reason(&bytes), "invalid_payload_framing");
    }

    #[test]
    fn hostile_counts_do_not_allocate() {
        // An array claiming 2^60 items in a few bytes fails fast instead of reserving memory.
        let mut datum = vec![0x0c];
        let mut z: u64 = 1 << 61; // zig-zag of 2^60
        while z >= 0x80 {
            datum.push((z as u8) | 0x80);
            z >>= 7;
        }
        datum.push(z as u8);
        assert_eq!(reason(&frame(&datum)), "invalid_payload_framing");
        // Over-long varints are rejected too.
        assert_eq!(
            reason(&frame(&[
                0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
            ])),
            "invalid_payload_framing"
        );
    }

    #[test]
    fn sized_and_multiple_blocks_are_accepted() {
        // Array written as two blocks, the first with a negative count and a byte size.
        let bytes = frame(&[
            0x0c, 0x03, 0x04, 0x04, 0x02, 0x04, 0x04, 0x02, 0x04, 0x06, 0x00,
        ]);
        assert_eq!(
            decode(&bytes).unwrap(),
            Value::Array(vec![Value::Long(1), Value::Long(2), Value::Long(3)])
        );
        // Map in two blocks.
        let bytes = frame(&[0x0e, 0x02, 0x02, b'a', 0x00, 0x02, 0x02, b'b', 0x00, 0x00]);
        assert_eq!(
            decode(&bytes).unwrap(),
            Value::Map(vec![("a".into(), Value::Null), ("b".into(), Value::Null)])
        );
    }

    #[test]
    fn deep_frames_are_rejected_without_recursing_forever() {
        let mut datum = Vec::new();
        for _ in 0..1000 {
            datum.extend_from_slice(&[0x0c, 0x02]);
        }
        datum.push(0x00);
        datum.resize(datum.len() + 1000, 0x00);
        assert_eq!(reason(&frame(&datum)), "nesting_too_deep");
    }
}
