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

/// `path` as one top-level key first (ESO reads `property: a.b` as the key `a.b` when there is
/// one), then as a path.
pub fn key_or_property(doc: &str, path: &str) -> Option<Vec<u8>> {
    if path.contains('.')
        && let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(doc)
        && let Some(value) = map.remove(path)
    {
        return Some(json_to_bytes(value));
    }
    property(doc, path)
}

/// `doc` (an empty object when `None` or empty) with the string `value` set at `path`, objects
/// made on the way (sjson's `Set`, which ESO pushes a `property` with). Errs when `doc` is not
/// a JSON object or the path runs into a value that is not one.
pub fn set_property(doc: Option<&str>, path: &str, value: &str) -> Result<String, String> {
    let mut root = match doc.filter(|d| !d.trim().is_empty()) {
        None => Value::Object(Default::default()),
        Some(d) => match serde_json::from_str::<Value>(d) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err("the remote value is not a JSON object".to_owned()),
        },
    };
    let segments = split(path);
    let (last, parents) = segments.split_last().expect("split never returns nothing");
    let mut current = &mut root;
    for segment in parents {
        let Value::Object(map) = current else {
            return Err(format!(
                "{segment:?} is inside a value that is not an object"
            ));
        };
        current = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    let Value::Object(map) = current else {
        return Err(format!("{last:?} is inside a value that is not an object"));
    };
    map.insert(last.clone(), Value::String(value.to_owned()));
    Ok(root.to_string())
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
    fn a_dotted_key_wins_over_the_path_and_a_set_makes_objects() {
        let doc = r#"{"a.b": "key", "a": {"b": "path"}}"#;
        assert_eq!(key_or_property(doc, "a.b").unwrap(), b"key");
        assert_eq!(
            key_or_property(r#"{"a": {"b": "path"}}"#, "a.b").unwrap(),
            b"path"
        );
        assert_eq!(
            set_property(None, "db.user", "u").unwrap(),
            r#"{"db":{"user":"u"}}"#
        );
        assert_eq!(
            set_property(Some(r#"{"db":{"pass":"p"}}"#), "db.user", "u").unwrap(),
            r#"{"db":{"pass":"p","user":"u"}}"#
        );
        assert!(set_property(Some("plain text"), "a", "u").is_err());
        assert!(set_property(Some(r#"{"a": 1}"#), "a.b", "u").is_err());
    }

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
