//! `dataFrom[].rewrite[].merge`: the fetched values (each a JSON object) merged into one map, as
//! ESO does it: keys in name order, then the `priority` keys in their order, later keys winning.

use std::collections::BTreeMap;

use api::external_secret::{MergeConflictPolicy, MergePriorityPolicy, MergeStrategy, RewriteMerge};
use serde_json::{Map, Value};

/// The map after the merge. Errors name keys of the map or of the merged objects, never values.
pub fn merge(
    op: &RewriteMerge,
    input: BTreeMap<String, Vec<u8>>,
) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let priority = op.priority.as_deref().unwrap_or_default();
    let order = input
        .keys()
        .filter(|k| !priority.contains(k))
        .chain(priority)
        .cloned()
        .collect::<Vec<_>>();
    let mut merged = Map::new();
    let mut conflicts = Vec::new();
    for key in order {
        let Some(value) = input.get(&key) else {
            if op.priority_policy == Some(MergePriorityPolicy::IgnoreNotFound) {
                continue;
            }
            return Err(format!(
                "priority key {key:?} is not among the fetched keys"
            ));
        };
        let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(value) else {
            return Err(format!("the value of {key:?} is not a JSON object"));
        };
        for (k, v) in object {
            if merged.contains_key(&k) {
                conflicts.push(k.clone());
            }
            merged.insert(k, v);
        }
    }
    if op.conflict_policy != Some(MergeConflictPolicy::Ignore) && !conflicts.is_empty() {
        return Err(format!(
            "keys {} are in more than one merged value; set conflictPolicy Ignore to let the later win",
            conflicts.join(", ")
        ));
    }
    match op.strategy.unwrap_or_default() {
        MergeStrategy::Extract => Ok(merged.into_iter().map(|(k, v)| (k, go_bytes(&v))).collect()),
        MergeStrategy::Json => {
            let into = op
                .into
                .as_deref()
                .filter(|i| !i.is_empty())
                .ok_or_else(|| {
                    "strategy JSON needs into: the key of the merged object".to_owned()
                })?;
            let mut out = input;
            out.insert(
                into.to_owned(),
                serde_json::to_vec(&go_numbers(Value::Object(merged)))
                    .expect("a JSON value serializes"),
            );
            Ok(out)
        }
    }
}

/// A value as ESO turns it into bytes: strings as they are, numbers as Go prints a float64,
/// objects and arrays as Go's `json.Marshal` (which escapes `<`, `>` and `&`), null as nothing.
fn go_bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Number(n) => n
            .as_f64()
            .map(|f| f.to_string())
            .unwrap_or_default()
            .into_bytes(),
        Value::Bool(b) => b.to_string().into_bytes(),
        Value::Null => Vec::new(),
        Value::Object(_) | Value::Array(_) => {
            let text = serde_json::to_string(&go_numbers(value.clone())).expect("serializes");
            // Outside strings JSON has none of these characters, so this escapes only text.
            text.replace('<', "\\u003c")
                .replace('>', "\\u003e")
                .replace('&', "\\u0026")
                .into_bytes()
        }
    }
}

/// Go decodes every JSON number to a float64: `1.0` prints as `1`.
fn go_numbers(value: Value) -> Value {
    match value {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e15 =>
            {
                #[allow(clippy::cast_possible_truncation)]
                Value::from(f as i64)
            }
            _ => Value::Number(n),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(go_numbers).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, go_numbers(v))).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    fn op(yaml: &str) -> RewriteMerge {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn text(map: &BTreeMap<String, Vec<u8>>) -> BTreeMap<&str, &str> {
        map.iter()
            .map(|(k, v)| (k.as_str(), std::str::from_utf8(v).unwrap()))
            .collect()
    }

    #[test]
    fn extract_flattens_the_objects_later_keys_winning() {
        let fetched = input(&[
            (
                "b",
                r#"{"user": "b", "port": 5432, "tls": true, "opts": {"x": "<y>"}, "n": null}"#,
            ),
            (
                "a",
                r#"{"user": "a", "host": "db", "ratio": 1.5, "one": 1.0}"#,
            ),
        ]);
        let out = merge(&op("conflictPolicy: Ignore"), fetched.clone()).unwrap();
        assert_eq!(
            text(&out),
            BTreeMap::from([
                ("host", "db"),
                ("n", ""),
                ("one", "1"),
                ("opts", r#"{"x":"\u003cy\u003e"}"#),
                ("port", "5432"),
                ("ratio", "1.5"),
                ("tls", "true"),
                // a, then b: b wins.
                ("user", "b"),
            ])
        );
        // Priority puts a last, so a wins.
        let out = merge(
            &op("conflictPolicy: Ignore\npriority: [a]"),
            fetched.clone(),
        )
        .unwrap();
        assert_eq!(text(&out)["user"], "a");
        // By default a conflict is an error naming the key, not the values.
        let err = merge(&op("{}"), fetched).unwrap_err();
        assert!(err.contains("user") && !err.contains("\"a\""), "{err}");
    }

    #[test]
    fn json_strategy_adds_one_key_and_keeps_the_others() {
        let fetched = input(&[("a", r#"{"x": 1}"#), ("b", r#"{"y": "2"}"#)]);
        let out = merge(&op("strategy: JSON\ninto: merged"), fetched.clone()).unwrap();
        assert_eq!(text(&out)["merged"], r#"{"x":1,"y":"2"}"#);
        assert_eq!(text(&out)["a"], r#"{"x": 1}"#);
        assert!(
            merge(&op("strategy: JSON"), fetched)
                .unwrap_err()
                .contains("into")
        );
    }

    #[test]
    fn priority_keys_must_exist_unless_told_otherwise() {
        let fetched = input(&[("a", r#"{"x": "1"}"#)]);
        assert!(merge(&op("priority: [missing]"), fetched.clone()).is_err());
        let out = merge(
            &op("priority: [missing]\npriorityPolicy: IgnoreNotFound"),
            fetched,
        )
        .unwrap();
        assert_eq!(text(&out), BTreeMap::from([("x", "1")]));
        let err = merge(&op("{}"), input(&[("a", "not json")])).unwrap_err();
        assert!(err.contains("\"a\"") && !err.contains("not json"), "{err}");
    }
}
