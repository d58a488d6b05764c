//! The subset of gjson paths ESO users write for `property`: dot-separated object keys and array
//! indexes, with `\.` for a literal dot.

use serde_json::Value;

/// The value at `path` inside the JSON document `doc`, as bytes; `None` when absent.
pub fn property(doc: &str, path: &str) -> Option<Vec<u8>> {
    let mut current: Value = serde_json::from_str(doc).ok()?;
    for segment in split(path) {
        current = match current {
            Value::Object(mut map) => map.remove(&segment)?,
            Value::Array(mut items) => {
                let i: usize = segment.parse().ok()?;
                (i < items.len()).then(|| items.swap_remove(i))?
            }
            _ => return None,
        };
    }
    Some(json_to_bytes(current))
}

/// Strings without their quotes; everything else as its JSON text.
pub fn json_to_bytes(v: Value) -> Vec<u8> {
    match v {
        Value::String(s) => s.into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

fn split(path: &str) -> Vec<String> {
    let mut segments = vec![String::new()];
    let mut chars = path.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(next) = chars.next() {
                    segments.last_mut().expect("never empty").push(next);
                }
            }
            '.' => segments.push(String::new()),
            c => segments.last_mut().expect("never empty").push(c),
        }
    }
    segments
}
