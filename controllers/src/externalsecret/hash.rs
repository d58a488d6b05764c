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

/// The data-hash of a generic target: Go's `%+v` of the object's `spec` (or `data`) as decoded
/// from JSON, `map[k:v]` with keys sorted, `[a b]` for lists, `<nil>` for null.
pub fn object_hash(value: &serde_json::Value) -> String {
    let mut text = String::new();
    go_print(value, &mut text);
    sha3_hex(&text)
}

fn go_print(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => {
                let _ = write!(out, "{i}");
            }
            (_, Some(u), _) => {
                let _ = write!(out, "{u}");
            }
            (_, _, Some(f)) => out.push_str(&go_float(f)),
            _ => {}
        },
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                go_print(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push_str("map[");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                go_print(&map[key], out);
            }
            out.push(']');
        }
    }
}

/// Go's `%v` of a float64: the shortest digits, in exponent form below 1e-4 and from 1e6 on.
fn go_float(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("Rust's {:e} always has an exponent");
    let exponent: i32 = exponent.parse().expect("a decimal exponent");
    if f != 0.0 && !(-4..6).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        format!("{f}")
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
        let mut text = String::new();
        go_print(&value, &mut text);
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
