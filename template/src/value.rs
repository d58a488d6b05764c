//! The values a template works on, modelled on the Go types that ESO's templates see: the data
//! map is `map[string]string`, and functions return strings, numbers, `[]interface{}`,
//! `map[string]interface{}`, `[]byte` and `time.Time`.

use std::collections::BTreeMap;

/// The deepest nesting of lists and maps a decoder (`fromJson`, `fromYaml`) builds. Go allows
/// 10000; ours is lower because values are dropped, printed and encoded recursively, and a
/// thread stack must hold that recursion.
pub(crate) const MAX_NESTING: usize = 1_000;

/// A Go value as a template sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Go's `nil` (an empty interface); printed `<nil>` inside a container and `<no value>` on its own.
    Nil,
    Bool(bool),
    /// Every signed integer kind; Go's templates compare and print them alike.
    Int(i64),
    Float(f64),
    String(String),
    /// `[]byte`: `%v` prints the numbers, `%s` the text.
    Bytes(Vec<u8>),
    /// `[]interface{}` (and `[]string`, which prints the same).
    List(Vec<Value>),
    /// `map[string]interface{}`; Go's fmt and `range` both visit keys in sorted order.
    Map(BTreeMap<String, Value>),
    Time(jiff::Zoned),
}

/// How much a value holds: about the bytes it occupies, and the most lists and maps that hold
/// one another in it.
pub(crate) struct Size {
    pub bytes: u64,
    pub depth: usize,
}

impl Value {
    /// Measured without recursion, since the value may be nested deeper than a stack holds.
    pub(crate) fn size(&self) -> Size {
        let node = std::mem::size_of::<Value>() as u64;
        let mut size = Size { bytes: 0, depth: 0 };
        // Each value with the number of lists and maps around it.
        let mut pending = vec![(self, 0)];
        while let Some((value, around)) = pending.pop() {
            size.bytes += node;
            match value {
                Value::String(s) => size.bytes += s.len() as u64,
                Value::Bytes(b) => size.bytes += b.len() as u64,
                Value::List(items) => {
                    size.depth = size.depth.max(around + 1);
                    pending.extend(items.iter().map(|v| (v, around + 1)));
                }
                Value::Map(map) => {
                    size.depth = size.depth.max(around + 1);
                    size.bytes += map.keys().map(|k| node + k.len() as u64).sum::<u64>();
                    pending.extend(map.values().map(|v| (v, around + 1)));
                }
                Value::Nil | Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Time(_) => {}
            }
        }
        size
    }

    /// The Go type name, as Go's error messages print it.
    pub fn go_type(&self) -> &'static str {
        match self {
            Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::String(_) => "string",
            Value::Bytes(_) => "[]uint8",
            Value::List(_) => "[]interface {}",
            Value::Map(_) => "map[string]interface {}",
            Value::Time(_) => "time.Time",
        }
    }

    /// Go's template truth: false, 0, nil, and empty strings, slices and maps are false.
    pub fn truth(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::String(s) => !s.is_empty(),
            Value::Bytes(b) => !b.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Time(_) => true,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

/// Go strings hold any bytes; Rust strings hold UTF-8. Bytes that are not UTF-8 (a PKCS#12
/// archive, a binary key) travel through the engine as characters of the last plane's private
/// use area, one per byte, and turn back into the same bytes on the way out. Characters of that
/// range in genuine text are escaped byte by byte too, so the round trip is lossless for any
/// input.
const ESCAPE_BASE: u32 = 0x10_FF00;

fn is_escape(c: char) -> bool {
    (ESCAPE_BASE..=ESCAPE_BASE + 0xFF).contains(&u32::from(c))
}

fn escape_byte(b: u8) -> char {
    char::from_u32(ESCAPE_BASE + u32::from(b)).expect("U+10FF00..U+10FFFF are characters")
}

/// The engine's string for Go string bytes `bytes`.
pub fn go_string(bytes: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(bytes)
        && !s.chars().any(is_escape)
    {
        return s.to_owned();
    }
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if is_escape(c) {
                let mut buf = [0; 4];
                out.extend(c.encode_utf8(&mut buf).bytes().map(escape_byte));
            } else {
                out.push(c);
            }
        }
        out.extend(chunk.invalid().iter().copied().map(escape_byte));
    }
    out
}

/// The Go string bytes an engine string stands for; the inverse of [`go_string`].
pub fn go_bytes(s: &str) -> std::borrow::Cow<'_, [u8]> {
    if !s.chars().any(is_escape) {
        return std::borrow::Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        if is_escape(c) {
            out.push((u32::from(c) - ESCAPE_BASE) as u8);
        } else {
            let mut buf = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_bytes_survive_the_round_trip() {
        let samples: [&[u8]; 5] = [
            b"plain text",
            "caf\u{e9} \u{10FF41}".as_bytes(),
            &[0x30, 0x82, 0xff, 0xfe, 0x00, 0x41],
            &[0xf4, 0x8f, 0xbd, 0x80],
            &[],
        ];
        for bytes in samples {
            assert_eq!(go_bytes(&go_string(bytes)).as_ref(), bytes);
        }
        assert_eq!(go_string(b"plain"), "plain");
    }
}
