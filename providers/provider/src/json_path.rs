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

/// `raw` decoded as a JSON object. Else what to add to "… is not a JSON object": nothing for
/// JSON of another type; for text that does not decode, the decoder's error, which says where
/// it stopped (nested too deep, say) and never what it read.
pub fn object(raw: &[u8]) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_slice(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(String::new()),
        Err(e) => Err(format!(": {e}")),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_or_why_not_without_the_text() {
        assert_eq!(object(br#"{"a": 1}"#).unwrap().len(), 1);
        assert_eq!(object(b"[1]").unwrap_err(), "");
        let deep = format!("{}1{}", "[".repeat(3000), "]".repeat(3000));
        let why = object(deep.as_bytes()).unwrap_err();
        assert!(why.starts_with(": recursion limit exceeded"), "{why}");
        let why = object(br#"{"password": "hunter2"#).unwrap_err();
        assert!(why.starts_with(": EOF while parsing"), "{why}");
        assert!(!why.contains("hunter2"), "{why}");
    }
}
