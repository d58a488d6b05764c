//! ESO's hashes, reproduced byte for byte so that Secrets written by ESO are adopted without a
//! rewrite: SHA3-224 over Go's `%+v` rendering of the value.

use std::collections::BTreeMap;
use std::fmt::Write;

use sha3::{Digest, Sha3_224};

fn sha3_hex(text: &str) -> String {
    hex::encode(Sha3_224::digest(text.as_bytes()))
}

/// The `reconcile.external-secrets.io/data-hash` annotation: Go prints `map[string][]byte` as
/// `map[k1:[1 2 3] k2:[]]` with keys sorted.
pub fn data_hash(data: &BTreeMap<String, Vec<u8>>) -> String {
    let mut text = String::from("map[");
    for (i, (key, value)) in data.iter().enumerate() {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(key);
        text.push_str(":[");
        for (j, byte) in value.iter().enumerate() {
            if j > 0 {
                text.push(' ');
            }
            let _ = write!(text, "{byte}");
        }
        text.push(']');
    }
    text.push(']');
    sha3_hex(&text)
}

/// The data-hash of a generic target: Go's `%+v` of the object's `spec` (or `data`) as
/// Kubernetes decodes it (integers as int64, other numbers as float64), maps with keys sorted.
pub fn object_hash(value: &serde_json::Value) -> String {
    sha3_hex(&external_secrets_template::gofmt::sprint_value(&as_go(
        value,
    )))
}

fn as_go(value: &serde_json::Value) -> external_secrets_template::Value {
    use external_secrets_template::Value as Go;
    use serde_json::Value;
    match value {
        Value::Null => Go::Nil,
        Value::Bool(b) => Go::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Go::Int(i),
            None => Go::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Go::String(s.clone()),
        Value::Array(items) => Go::List(items.iter().map(as_go).collect()),
        Value::Object(map) => Go::Map(map.iter().map(|(k, v)| (k.clone(), as_go(v))).collect()),
    }
}

/// The `reconcile.external-secrets.io/created-by` label value for `namespace/name`.
pub fn created_by(namespace: &str, name: &str) -> String {
    sha3_hex(&format!("{namespace}/{name}"))
}

/// A hash of labels and annotations for `status.syncedResourceVersion`, so that a changed label
/// or annotation (e.g. `force-sync`) triggers a refresh. Go prints maps sorted as `map[k:v]`.
pub fn meta_hash(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> String {
    let render = |m: &BTreeMap<String, String>| {
        let items: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        format!("map[{}]", items.join(" "))
    };
    sha3_hex(&format!(
        "{{Labels:{} Annotations:{}}}",
        render(labels),
        render(annotations)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_hash_prints_as_go() {
        // What Go's fmt.Sprintf("%+v") printed for the same value decoded into map[string]any
        // (floats for the non-integers, as Kubernetes decodes them).
        let value = serde_json::json!({
            "i": 5432, "f": 1234567.5, "g": 123456.5, "h": 0.0001, "k": 0.00001, "l": 1e21,
            "m": 1.5, "n": null, "o": ["a", 1, {"z": "y", "a": true}], "": "empty",
            "sp ace": "x y"
        });
        let text = external_secrets_template::gofmt::sprint_value(&as_go(&value));
        assert_eq!(
            text,
            "map[:empty f:1.2345675e+06 g:123456.5 h:0.0001 i:5432 k:1e-05 l:1e+21 m:1.5 n:<nil> o:[a 1 map[a:true z:y]] sp ace:x y]"
        );
        assert_eq!(object_hash(&value), sha3_hex(&text));
    }

    #[test]
    fn data_hash_follows_go_formatting() {
        // sha3-224("map[]") and sha3-224("map[a:[104 105] b:[]]"), computed independently.
        let empty = BTreeMap::new();
        assert_eq!(data_hash(&empty), sha3_hex("map[]"));
        let data = BTreeMap::from([("b".to_string(), vec![]), ("a".to_string(), b"hi".to_vec())]);
        assert_eq!(data_hash(&data), sha3_hex("map[a:[104 105] b:[]]"));
        assert_eq!(sha3_hex("").len(), 56);
        assert_eq!(
            sha3_hex(""),
            "6b4e03423667dbb73b6e15454f0eb1abd4597f9a1b078e3f5b5a6bc7"
        );
    }
}
