//! Whole provider objects between `v1alpha1` (ESO's shape) and `v1beta1` of one kind, in both
//! groups, losing nothing: the part every such kind shares. A kind says how its two spec types
//! map onto each other ([`TwoVersions`]); [`convert`] does the rest.
//!
//! What one version cannot hold travels in an annotation on the object at the other version: a
//! JSON merge patch (RFC 7386) that, applied to the plain conversion back, restores the original
//! spec, so every field that exists in only one version (now or later) round-trips the same way.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::provider_kinds::{ConversionError, Scope};

/// The two versions a [`TwoVersions`] kind is served at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1alpha1,
    V1beta1,
}

impl Version {
    fn parse(version: &str) -> Option<Self> {
        match version {
            "v1alpha1" => Some(Self::V1alpha1),
            "v1beta1" => Some(Self::V1beta1),
            _ => None,
        }
    }
}

/// A provider kind served at `v1alpha1` and `v1beta1`: its spec types and the plain mapping
/// between them, which may drop what the target cannot hold (the leftover annotations keep it).
pub trait TwoVersions {
    /// The kind, for example `Vault`.
    const KIND: &'static str;
    /// On a `v1beta1` object: what its `v1alpha1` original held that `v1beta1` cannot, as a
    /// merge patch of the `v1alpha1` spec (`conversion.external-secrets.io/<provider>-v1alpha1`).
    const V1ALPHA1_ONLY: &'static str;
    /// On a `v1alpha1` object: the same for its `v1beta1` original.
    const V1BETA1_ONLY: &'static str;

    type V1alpha1: Serialize + DeserializeOwned;
    type V1beta1: Serialize + DeserializeOwned;

    /// The plain conversion: what v1beta1 can hold of `alpha`, without leftovers.
    fn to_beta(alpha: &Self::V1alpha1) -> Self::V1beta1;
    /// The plain conversion back.
    fn to_alpha(beta: &Self::V1beta1) -> Self::V1alpha1;

    /// Applies a leftover (a merge patch, see [`merge`]) to `spec`, the plain conversion to
    /// `version`. The leftover may have been written before the object was edited at the other
    /// version, so a kind keeps only what cannot change what the spec does.
    fn restore(version: Version, spec: &mut Value, leftover: Value);
}

type Result<T, E = ConversionError> = std::result::Result<T, E>;

/// The [`crate::provider_kinds::Conversion`] of the kind `K`.
pub fn convert<K: TwoVersions>(mut object: Value, to_api_version: &str) -> Result<Value> {
    let from_api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or_else(|| ConversionError::new("apiVersion", "missing or not a string"))?
        .to_owned();
    let (from_group, from) = split_api_version(&from_api_version, "apiVersion")?;
    let (to_group, to) = split_api_version(to_api_version, "desiredAPIVersion")?;
    if Scope::of_group(from_group).is_none() {
        return Err(ConversionError::new(
            "apiVersion",
            format!("{from_group} is not a provider group"),
        ));
    }
    if to_group != from_group {
        return Err(ConversionError::new(
            "desiredAPIVersion",
            format!("{to_api_version} is in another group than the object's {from_api_version}"),
        ));
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != K::KIND
    {
        return Err(ConversionError::new(
            "kind",
            format!(
                "{kind} objects are not converted by the {} converter",
                K::KIND
            ),
        ));
    }
    let from = Version::parse(from).ok_or_else(|| unserved::<K>("apiVersion", from))?;
    let to = Version::parse(to).ok_or_else(|| unserved::<K>("desiredAPIVersion", to))?;
    if from == to {
        return Ok(object);
    }

    let Some(fields) = object.as_object_mut() else {
        return Err(ConversionError::new("object", "not a JSON object"));
    };
    let spec = fields
        .remove("spec")
        .ok_or_else(|| ConversionError::new("spec", "missing"))?;
    let mut annotations = take_annotations(fields)?;
    let spec = match to {
        Version::V1beta1 => one_way::<K, _, _>(spec, &mut annotations, to, K::to_beta, K::to_alpha),
        Version::V1alpha1 => {
            one_way::<K, _, _>(spec, &mut annotations, to, K::to_alpha, K::to_beta)
        }
    }?;
    fields.insert("spec".to_owned(), spec);
    fields.insert(
        "apiVersion".to_owned(),
        Value::String(to_api_version.to_owned()),
    );
    put_annotations(fields, annotations);
    Ok(object)
}

/// A spec of the other version to `to`: the plain conversion `there`, with the leftover the
/// object carries for `to` restored (and removed: the way back writes its own), and what the
/// plain conversion `back` would lose recorded for the other version.
fn one_way<K, From, To>(
    spec: Value,
    annotations: &mut Map<String, Value>,
    to: Version,
    there: fn(&From) -> To,
    back: fn(&To) -> From,
) -> Result<Value>
where
    K: TwoVersions,
    From: Serialize + DeserializeOwned,
    To: Serialize + DeserializeOwned,
{
    let (from_only, to_only) = match to {
        Version::V1alpha1 => (K::V1BETA1_ONLY, K::V1ALPHA1_ONLY),
        Version::V1beta1 => (K::V1ALPHA1_ONLY, K::V1BETA1_ONLY),
    };
    let original: From = parse("spec", spec)?;
    let mut converted = there(&original);
    if let Some(leftover) = take_leftover(annotations, to_only)? {
        let mut restored = json(&converted);
        K::restore(to, &mut restored, leftover);
        converted = parse(&annotation_field(to_only), restored)?;
    }
    set_leftover(
        annotations,
        from_only,
        &json(&original),
        &json(&back(&converted)),
    );
    Ok(json(&converted))
}

/// Records on the converted object what `original` holds that the plain conversion back
/// (`plain_back`) lacks; removes a stale record when nothing is missing.
fn set_leftover(
    annotations: &mut Map<String, Value>,
    key: &str,
    original: &Value,
    plain_back: &Value,
) {
    match diff(plain_back, original) {
        Some(patch) => {
            annotations.insert(key.to_owned(), Value::String(patch.to_string()));
        }
        None => {
            annotations.remove(key);
        }
    }
}

fn take_leftover(annotations: &mut Map<String, Value>, key: &str) -> Result<Option<Value>> {
    let Some(value) = annotations.remove(key) else {
        return Ok(None);
    };
    let field = annotation_field(key);
    let text = value
        .as_str()
        .ok_or_else(|| ConversionError::new(&field, "not a string"))?;
    let patch: Value = serde_json::from_str(text)
        .map_err(|e| ConversionError::new(&field, format!("not JSON: {e}")))?;
    if !patch.is_object() {
        return Err(ConversionError::new(&field, "not a JSON object"));
    }
    Ok(Some(patch))
}

fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

fn take_annotations(fields: &mut Map<String, Value>) -> Result<Map<String, Value>> {
    let Some(metadata) = fields.get_mut("metadata") else {
        return Ok(Map::new());
    };
    let metadata = metadata
        .as_object_mut()
        .ok_or_else(|| ConversionError::new("metadata", "not an object"))?;
    match metadata.remove("annotations") {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(annotations)) => Ok(annotations),
        Some(_) => Err(ConversionError::new(
            "metadata.annotations",
            "not an object",
        )),
    }
}

/// Puts the annotations back; an empty map is left out, as the API server does.
fn put_annotations(fields: &mut Map<String, Value>, annotations: Map<String, Value>) {
    if annotations.is_empty() {
        return;
    }
    let metadata = fields
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(metadata) = metadata.as_object_mut() {
        metadata.insert("annotations".to_owned(), Value::Object(annotations));
    }
}

fn split_api_version<'a>(api_version: &'a str, field: &str) -> Result<(&'a str, &'a str)> {
    api_version.split_once('/').ok_or_else(|| {
        ConversionError::new(field, format!("{api_version:?} is not <group>/<version>"))
    })
}

fn unserved<K: TwoVersions>(field: &str, version: &str) -> ConversionError {
    ConversionError::new(
        field,
        format!(
            "{} is not served at {version}; it is served at v1alpha1 and v1beta1",
            K::KIND
        ),
    )
}

/// Deserializes `value`, naming the path of the first field at fault under `field`.
fn parse<T: DeserializeOwned>(field: &str, value: Value) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let at = if path == "." {
            field.to_owned()
        } else {
            format!("{field}.{path}")
        };
        ConversionError::new(at, e.into_inner().to_string())
    })
}

fn json<T: Serialize>(value: &T) -> Value {
    // The spec types are plain data: maps with string keys, no custom serializers that fail.
    serde_json::to_value(value).unwrap_or_default()
}

/// The JSON merge patch that turns `from` into `to`; `None` when they are equal. `to` holds no
/// `null`s (the spec types skip unset fields), so every value it holds can be expressed.
fn diff(from: &Value, to: &Value) -> Option<Value> {
    match (from, to) {
        (Value::Object(from), Value::Object(to)) => {
            let mut patch = Map::new();
            for (key, value) in to {
                let change = match from.get(key) {
                    Some(old) => diff(old, value),
                    None => Some(value.clone()),
                };
                if let Some(change) = change {
                    patch.insert(key.clone(), change);
                }
            }
            for key in from.keys().filter(|k| !to.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if from == to => None,
        _ => Some(to.clone()),
    }
}

/// Applies a JSON merge patch (RFC 7386).
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn diff_then_merge_restores_every_shape() {
        let cases = [
            (json!({}), json!({"a": {}})),
            (json!({"a": {"b": 1}}), json!({"a": {}})),
            (json!({"a": 1}), json!({"a": {"b": [1, 2]}})),
            (json!({"a": {"b": 1}}), json!({"a": 2})),
            (json!({"a": 1, "b": 2}), json!({"b": 3})),
            (
                json!({"a": {"b": {"c": 1}}}),
                json!({"a": {"b": {"c": 1, "d": {}}}}),
            ),
        ];
        for (from, to) in cases {
            let mut restored = from.clone();
            if let Some(patch) = diff(&from, &to) {
                merge(&mut restored, &patch);
            }
            assert_eq!(restored, to, "from {from}");
        }
        assert_eq!(diff(&json!({"a": [1]}), &json!({"a": [1]})), None);
    }
}
