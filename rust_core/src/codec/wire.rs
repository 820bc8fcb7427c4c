//! The Avro binary encoding of the Value schema, one primitive at a time.
//!
//! [`Writer`] and [`Reader`] know the wire format (union branches, zig-zag varints,
//! blocked arrays and maps, single-object framing); walkers over concrete value
//! representations (the Rust [`super::Value`], Python objects) drive them.

use super::error::CodecError;
use super::schema::value_schema_fingerprint;

/// Single-object encoding marker.
pub const MAGIC: [u8; 2] = [0xC3, 0x01];
/// Magic plus fingerprint.
pub const HEADER_LEN: usize = 10;

/// Union branch of each Value variant, in schema order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Branch {
    Null = 0,
    Boolean = 1,
    Long = 2,
    Double = 3,
    Bytes = 4,
    String = 5,
    Array = 6,
    Map = 7,
}

impl Branch {
    fn from_index(index: i64) -> Option<Branch> {
        Some(match index {
            0 => Branch::Null,
            1 => Branch::Boolean,
            2 => Branch::Long,
            3 => Branch::Double,
            4 => Branch::Bytes,
            5 => Branch::String,
            6 => Branch::Array,
            7 => Branch::Map,
            _ => return None,
        })
    }
}

/// Appends one Value datum to a frame.
pub struct Writer {
    buf: Vec<u8>,
}

impl Default for Writer {
    fn default() -> Self {
        Self::with_capacity(64)
    }
}

impl Writer {
    /// A writer whose buffer already holds the frame header.
    pub fn with_capacity(capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity.max(HEADER_LEN + 1));
        buf.extend_from_slice(&MAGIC);
        buf.extend_from_slice(&value_schema_fingerprint());
        Writer { buf }
    }

    /// The finished frame.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }

    /// The frame so far (header included).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    #[inline]
    fn varint(&mut self, value: i64) {
        let mut z = ((value << 1) ^ (value >> 63)) as u64;
        while z >= 0x80 {
            self.buf.push((z as u8) | 0x80);
            z >>= 7;
        }
        self.buf.push(z as u8);
    }

    #[inline]
    fn branch(&mut self, branch: Branch) {
        // Branch indices 0..=7 zig-zag to single bytes 0..=14.
        self.buf.push((branch as u8) << 1);
    }

    #[inline]
    fn raw_bytes(&mut self, data: &[u8]) {
        self.varint(data.len() as i64);
        self.buf.extend_from_slice(data);
    }

    pub fn null(&mut self) {
        self.branch(Branch::Null);
    }

    pub fn boolean(&mut self, value: bool) {
        self.branch(Branch::Boolean);
        self.buf.push(u8::from(value));
    }

    pub fn long(&mut self, value: i64) {
        self.branch(Branch::Long);
        self.varint(value);
    }

    pub fn double(&mut self, value: f64) -> Result<(), CodecError> {
        if !value.is_finite() {
            return Err(CodecError::NonFiniteFloat);
        }
        self.branch(Branch::Double);
        self.buf.extend_from_slice(&value.to_le_bytes());
        Ok(())
    }

    pub fn bytes(&mut self, value: &[u8]) {
        self.branch(Branch::Bytes);
        self.raw_bytes(value);
    }

    pub fn string(&mut self, value: &str) {
        self.branch(Branch::String);
        self.raw_bytes(value.as_bytes());
    }

    /// Starts an array of `len` items; write the items, then call [`Writer::end_block`].
    pub fn begin_array(&mut self, len: usize) {
        self.branch(Branch::Array);
        if len > 0 {
            self.varint(len as i64);
        }
    }

    /// Starts a map of `len` entries; write key then value for each, then [`Writer::end_block`].
    pub fn begin_map(&mut self, len: usize) {
        self.branch(Branch::Map);
        if len > 0 {
            self.varint(len as i64);
        }
    }

    pub fn map_key(&mut self, key: &str) {
        self.raw_bytes(key.as_bytes());
    }

    /// Ends an array or map: the zero-count block.
    pub fn end_block(&mut self) {
        self.buf.push(0);
    }
}

/// Builds a concrete value from decoded primitives (Rust values, Python objects, ...).
pub trait Builder {
    type Node;
    type Error: From<CodecError>;
    fn null(&mut self) -> Result<Self::Node, Self::Error>;
    fn boolean(&mut self, value: bool) -> Result<Self::Node, Self::Error>;
    fn long(&mut self, value: i64) -> Result<Self::Node, Self::Error>;
    fn double(&mut self, value: f64) -> Result<Self::Node, Self::Error>;
    fn bytes(&mut self, value: &[u8]) -> Result<Self::Node, Self::Error>;
    fn string(&mut self, value: &str) -> Result<Self::Node, Self::Error>;
    fn array(&mut self, items: Vec<Self::Node>) -> Result<Self::Node, Self::Error>;
    /// Keys arrive in wire order; a builder must reject a duplicate key with
    /// [`CodecError::Framing`] rather than silently drop an entry.
    fn map(&mut self, entries: Vec<(&str, Self::Node)>) -> Result<Self::Node, Self::Error>;
}

/// Reads one frame; never panics and never allocates more than the input can justify.
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

/// Checks magic and fingerprint and returns the datum's bytes.
pub fn strip_header(frame: &[u8]) -> Result<&[u8], CodecError> {
    if frame.len() < MAGIC.len() || frame[..2] != MAGIC {
        return Err(CodecError::framing("missing single-object magic C3 01"));
    }
    if frame.len() < HEADER_LEN {
        return Err(CodecError::framing("frame shorter than its 10-byte header"));
    }
    let fingerprint = &frame[2..HEADER_LEN];
    if fingerprint != value_schema_fingerprint() {
        let hex: String = fingerprint.iter().map(|b| format!("{b:02x}")).collect();
        return Err(CodecError::UnknownSchema(hex));
    }
    if frame.len() == HEADER_LEN {
        return Err(CodecError::framing("frame has no datum"));
    }
    Ok(&frame[HEADER_LEN..])
}

/// Decodes a whole frame with `builder`.
pub fn decode_frame<B: Builder>(frame: &[u8], builder: &mut B) -> Result<B::Node, B::Error> {
    let datum = strip_header(frame)?;
    let mut reader = Reader {
        data: datum,
        pos: 0,
    };
    let node = reader.value(builder, 0)?;
    if reader.pos != datum.len() {
        return Err(CodecError::framing(format!(
            "{} trailing bytes after the datum",
            datum.len() - reader.pos
        ))
        .into());
    }
    Ok(node)
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    fn byte(&mut self, what: &str) -> Result<u8, CodecError> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or_else(|| CodecError::framing(format!("truncated {what}")))?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self, what: &str) -> Result<i64, CodecError> {
        let mut z: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte(what)?;
            if shift == 63 && b > 1 {
                return Err(CodecError::framing(format!(
                    "{what} varint overflows 64 bits"
                )));
            }
            z |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(CodecError::framing(format!(
                    "{what} varint longer than 10 bytes"
                )));
            }
        }
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    fn slice(&mut self, what: &str) -> Result<&'a [u8], CodecError> {
        let len = self.varint(what)?;
        if len < 0 {
            return Err(CodecError::framing(format!("negative {what} length {len}")));
        }
        let len = len as u64;
        if len > self.remaining() as u64 {
            return Err(CodecError::framing(format!(
                "truncated {what}: {len} bytes announced, {} left",
                self.remaining()
            )));
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok(&self.data[start..self.pos])
    }

    fn str(&mut self, what: &str) -> Result<&'a str, CodecError> {
        let raw = self.slice(what)?;
        std::str::from_utf8(raw).map_err(|_| CodecError::framing(format!("{what} is not UTF-8")))
    }

    /// Next block's item count (0 ends the container). Negative counts carry a byte
    /// size, which must itself fit in what is left. `min_item_len` bounds how many items
    /// the remaining input could possibly hold, so a hostile count cannot allocate.
    fn block_count(&mut self, what: &str, min_item_len: usize) -> Result<usize, CodecError> {
        let count = self.varint(what)?;
        let count = if count < 0 {
            let size = self.varint(what)?;
            if size < 0 || size as u64 > self.remaining() as u64 {
                return Err(CodecError::framing(format!("bad {what} block size {size}")));
            }
            count.unsigned_abs()
        } else {
            count as u64
        };
        if count.saturating_mul(min_item_len as u64) > self.remaining() as u64 {
            return Err(CodecError::framing(format!(
                "truncated {what}: block of {count} items in {} bytes",
                self.remaining()
            )));
        }
        Ok(count as usize)
    }

    fn value<B: Builder>(&mut self, b: &mut B, depth: usize) -> Result<B::Node, B::Error> {
        let index = self.varint("union branch")?;
        let branch = Branch::from_index(index)
            .ok_or_else(|| CodecError::framing(format!("union branch {index} out of range")))?;
        match branch {
            Branch::Null => b.null(),
            Branch::Boolean => match self.byte("boolean")? {
                0 => b.boolean(false),
                1 => b.boolean(true),
                other => Err(CodecError::framing(format!("boolean byte {other}")).into()),
            },
            Branch::Long => {
                let v = self.varint("long")?;
                b.long(v)
            }
            Branch::Double => {
                if self.remaining() < 8 {
                    return Err(CodecError::framing("truncated double").into());
                }
                let mut raw = [0u8; 8];
                raw.copy_from_slice(&self.data[self.pos..self.pos + 8]);
                self.pos += 8;
                let v = f64::from_le_bytes(raw);
                if !v.is_finite() {
                    return Err(CodecError::framing("non-finite double").into());
                }
                b.double(v)
            }
            Branch::Bytes => {
                let raw = self.slice("bytes")?;
                b.bytes(raw)
            }
            Branch::String => {
                let s = self.str("string")?;
                b.string(s)
            }
            Branch::Array => {
                if depth >= super::MAX_DEPTH {
                    return Err(CodecError::TooDeep.into());
                }
                let mut items = Vec::new();
                loop {
                    let count = self.block_count("array", 1)?;
                    if count == 0 {
                        break;
                    }
                    items.reserve(count);
                    for _ in 0..count {
                        items.push(self.value(b, depth + 1)?);
                    }
                }
                b.array(items)
            }
            Branch::Map => {
                if depth >= super::MAX_DEPTH {
                    return Err(CodecError::TooDeep.into());
                }
                let mut entries = Vec::new();
                loop {
                    let count = self.block_count("map", 2)?;
                    if count == 0 {
                        break;
                    }
                    entries.reserve(count);
                    for _ in 0..count {
                        let key = self.str("map key")?;
                        let value = self.value(b, depth + 1)?;
                        entries.push((key, value));
                    }
                }
                b.map(entries)
            }
        }
    }
}
