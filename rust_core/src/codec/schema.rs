//! The Value schema, its Parsing Canonical Form and its CRC-64-AVRO fingerprint.
//!
//! The fingerprint is computed from the schema text rather than hard-coded, so a
//! change to the schema file can never silently keep an old fingerprint.

use serde_json::Value as Json;
use std::sync::OnceLock;

/// The fixed recursive Value schema shared with the Durable Workflow SDKs.
pub const VALUE_SCHEMA_JSON: &str = include_str!("value.avsc");

/// Seed of the Rabin CRC-64-AVRO fingerprint (Avro specification).
const CRC64_AVRO_EMPTY: u64 = 0xc15d_213a_a4d7_a795;

fn crc64_table() -> &'static [u64; 256] {
    static TABLE: OnceLock<[u64; 256]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = [0u64; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut fp = i as u64;
            for _ in 0..8 {
                fp = (fp >> 1) ^ (CRC64_AVRO_EMPTY & (0u64.wrapping_sub(fp & 1)));
            }
            *slot = fp;
        }
        table
    })
}

/// Rabin CRC-64-AVRO of `data`, as the Avro specification defines it.
pub fn crc64_avro(data: &[u8]) -> u64 {
    let table = crc64_table();
    data.iter().fold(CRC64_AVRO_EMPTY, |fp, &b| {
        (fp >> 8) ^ table[((fp ^ u64::from(b)) & 0xff) as usize]
    })
}

/// Error in a schema handed to [`parsing_canonical_form`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError(pub String);

/// The Parsing Canonical Form of an Avro schema (Avro specification, "Schema Resolution").
pub fn parsing_canonical_form(schema_json: &str) -> Result<String, SchemaError> {
    let schema: Json =
        serde_json::from_str(schema_json).map_err(|e| SchemaError(format!("invalid JSON: {e}")))?;
    let mut out = String::new();
    let mut seen = Vec::new();
    write_pcf(&schema, None, &mut seen, &mut out)?;
    Ok(out)
}

const PRIMITIVES: [&str; 8] = [
    "null", "boolean", "int", "long", "float", "double", "bytes", "string",
];

fn full_name(name: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) if !name.contains('.') && !ns.is_empty() => format!("{ns}.{name}"),
        _ => name.to_owned(),
    }
}

fn json_str(s: &str) -> String {
    Json::String(s.to_owned()).to_string()
}

fn write_pcf(
    schema: &Json,
    namespace: Option<&str>,
    seen: &mut Vec<String>,
    out: &mut String,
) -> Result<(), SchemaError> {
    match schema {
        Json::String(name) => {
            if PRIMITIVES.contains(&name.as_str()) {
                out.push_str(&json_str(name));
            } else {
                out.push_str(&json_str(&full_name(name, namespace)));
            }
            Ok(())
        }
        Json::Array(branches) => {
            out.push('[');
            for (i, branch) in branches.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_pcf(branch, namespace, seen, out)?;
            }
            out.push(']');
            Ok(())
        }
        Json::Object(obj) => {
            let kind = obj
                .get("type")
                .and_then(Json::as_str)
                .ok_or_else(|| SchemaError("schema object without a string \"type\"".into()))?;
            match kind {
                "record" | "enum" | "fixed" => {
                    let name = obj
                        .get("name")
                        .and_then(Json::as_str)
                        .ok_or_else(|| SchemaError(format!("{kind} without a name")))?;
                    let own_ns = obj.get("namespace").and_then(Json::as_str).or(namespace);
                    let full = full_name(name, own_ns);
                    let inner_ns = full.rsplit_once('.').map(|(ns, _)| ns.to_owned());
                    if seen.contains(&full) {
                        out.push_str(&json_str(&full));
                        return Ok(());
                    }
                    seen.push(full.clone());
                    out.push_str(&format!(
                        "{{\"name\":{},\"type\":\"{kind}\"",
                        json_str(&full)
                    ));
                    match kind {
                        "record" => {
                            let fields = obj
                                .get("fields")
                                .and_then(Json::as_array)
                                .ok_or_else(|| SchemaError("record without fields".into()))?;
                            out.push_str(",\"fields\":[");
                            for (i, field) in fields.iter().enumerate() {
                                if i > 0 {
                                    out.push(',');
                                }
                                let fname = field
                                    .get("name")
                                    .and_then(Json::as_str)
                                    .ok_or_else(|| SchemaError("field without a name".into()))?;
                                let ftype = field
                                    .get("type")
                                    .ok_or_else(|| SchemaError("field without a type".into()))?;
                                out.push_str(&format!("{{\"name\":{},\"type\":", json_str(fname)));
                                write_pcf(ftype, inner_ns.as_deref(), seen, out)?;
                                out.push('}');
                            }
                            out.push(']');
                        }
                        "enum" => {
                            let symbols = obj
                                .get("symbols")
                                .ok_or_else(|| SchemaError("enum without symbols".into()))?;
                            out.push_str(&format!(",\"symbols\":{symbols}"));
                        }
                        _ => {
                            let size = obj
                                .get("size")
                                .ok_or_else(|| SchemaError("fixed without size".into()))?;
                            out.push_str(&format!(",\"size\":{size}"));
                        }
                    }
                    out.push('}');
                    Ok(())
                }
                "array" => {
                    let items = obj
                        .get("items")
                        .ok_or_else(|| SchemaError("array without items".into()))?;
                    out.push_str("{\"type\":\"array\",\"items\":");
                    write_pcf(items, namespace, seen, out)?;
                    out.push('}');
                    Ok(())
                }
                "map" => {
                    let values = obj
                        .get("values")
                        .ok_or_else(|| SchemaError("map without values".into()))?;
                    out.push_str("{\"type\":\"map\",\"values\":");
                    write_pcf(values, namespace, seen, out)?;
                    out.push('}');
                    Ok(())
                }
                primitive if PRIMITIVES.contains(&primitive) => {
                    out.push_str(&json_str(primitive));
                    Ok(())
                }
                other => Err(SchemaError(format!("unknown schema type {other:?}"))),
            }
        }
        other => Err(SchemaError(format!("unexpected schema node {other}"))),
    }
}

/// The 8 fingerprint bytes as they appear on the wire (little-endian CRC-64-AVRO).
pub fn value_schema_fingerprint() -> [u8; 8] {
    static FINGERPRINT: OnceLock<[u8; 8]> = OnceLock::new();
    *FINGERPRINT.get_or_init(|| {
        let pcf = parsing_canonical_form(VALUE_SCHEMA_JSON)
            .expect("the embedded Value schema is valid Avro");
        crc64_avro(pcf.as_bytes()).to_le_bytes()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn fingerprint_matches_the_interop_contract() {
        assert_eq!(hex(&value_schema_fingerprint()), "e2a33dff55802237");
    }

    #[test]
    fn crc64_of_empty_input_is_the_seed() {
        assert_eq!(crc64_avro(b""), CRC64_AVRO_EMPTY);
    }

    #[test]
    fn canonical_form_resolves_inherited_namespaces() {
        let pcf = parsing_canonical_form(VALUE_SCHEMA_JSON).unwrap();
        assert!(pcf.starts_with(
            "{\"name\":\"durable_workflow.protocol.Value\",\"type\":\"record\",\"fields\":"
        ));
        assert!(pcf.contains("\"durable_workflow.protocol.BooleanValue\""));
        assert!(pcf.contains("\"items\":\"durable_workflow.protocol.Value\""));
        assert!(!pcf.contains(' '));
    }

    #[test]
    fn canonical_form_of_primitives_and_errors() {
        assert_eq!(
            parsing_canonical_form("{\"type\":\"long\"}").unwrap(),
            "\"long\""
        );
        assert!(parsing_canonical_form("{\"type\":\"nope\"}").is_err());
        assert!(parsing_canonical_form("not json").is_err());
    }
}
